"""Reading a PEFT LoRA adapter folder without loading tensors, and its checksum.

The agent (before vLLM sees files), the operator (validation) and the CLI (`adapter push`) all
use this one implementation.

An adapter is exactly two files, the ones vLLM reads:

    adapter_config.json          PEFT LoraConfig (r, lora_alpha, target_modules, ...)
    adapter_model.safetensors    lora_A / lora_B tensors

Checksum (`sha256:<hex>`): sha256 over, for each of the two files in the order above,
    file name (UTF-8) + b"\\0" + size as 8-byte big-endian + file bytes.
Framing each file with its name and length means no two different adapters can hash alike by
moving bytes between files. Other files in the folder (README.md, ...) are ignored and never
copied to a replica.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_FILES: tuple[str, ...] = (CONFIG_FILE, WEIGHTS_FILE)

# safetensors: 8-byte little-endian header length, then that many bytes of JSON.
_MAX_HEADER_BYTES = 100 * 2**20
_TENSOR_NAME = re.compile(
    r"layers\.(?P<layer>\d+)\.(?:[A-Za-z_]+\.)?(?P<module>[A-Za-z_]+)\.lora_(?P<ab>[AB])(?:\.[A-Za-z_]+)?\.weight$"
)
_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


class AdapterFormatError(ValueError):
    """The folder is not a well-formed PEFT LoRA adapter; the message says what is wrong."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class AdapterInfo:
    """What an adapter folder declares and holds."""

    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    base_model_name: str | None
    tensors: tuple[TensorInfo, ...]
    size_bytes: int


@dataclass(frozen=True)
class BaseModelDims:
    """The dimensions of a Llama-style base model that LoRA tensor shapes must match."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BaseModelDims:
        """From a Hugging Face config.json (LlamaConfig and compatible)."""
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            hidden_size=hidden,
            intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
        )

    @classmethod
    def from_model_dir(cls, path: Path) -> BaseModelDims:
        return cls.from_config(json.loads((path / "config.json").read_text()))

    def io_dims(self, module: str) -> tuple[int, int] | None:
        """(in_features, out_features) of a projection, or None for an unknown module."""
        q_out = self.num_attention_heads * self.head_dim
        kv_out = self.num_key_value_heads * self.head_dim
        return {
            "q_proj": (self.hidden_size, q_out),
            "k_proj": (self.hidden_size, kv_out),
            "v_proj": (self.hidden_size, kv_out),
            "o_proj": (q_out, self.hidden_size),
            "gate_proj": (self.hidden_size, self.intermediate_size),
            "up_proj": (self.hidden_size, self.intermediate_size),
            "down_proj": (self.intermediate_size, self.hidden_size),
        }.get(module)


@dataclass
class ShapeReport:
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes from a safetensors file, reading only its header."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise AdapterFormatError(f"{path.name}: too short to be safetensors")
        (length,) = struct.unpack("<Q", head)
        if length > min(_MAX_HEADER_BYTES, size - 8):
            raise AdapterFormatError(f"{path.name}: header length {length} is implausible")
        raw = f.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterFormatError(f"{path.name}: header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise AdapterFormatError(f"{path.name}: header is not a JSON object")
    tensors: dict[str, TensorInfo] = {}
    spans: list[tuple[int, int, str]] = []
    data_len = size - 8 - length
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(meta["dtype"])
            shape = tuple(int(d) for d in meta["shape"])
            start, end = (int(x) for x in meta["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise AdapterFormatError(f"{path.name}: bad entry for tensor {name!r}") from exc
        if dtype not in _DTYPE_BYTES:
            raise AdapterFormatError(f"{path.name}: tensor {name!r} has unknown dtype {dtype!r}")
        if any(d < 0 for d in shape):
            raise AdapterFormatError(f"{path.name}: tensor {name!r} has a negative dimension")
        count = 1
        for d in shape:
            count *= d
        if not (0 <= start <= end <= data_len) or end - start != count * _DTYPE_BYTES[dtype]:
            raise AdapterFormatError(f"{path.name}: tensor {name!r} offsets do not match its shape")
        tensors[name] = TensorInfo(name=name, dtype=dtype, shape=shape)
        spans.append((start, end, name))
    # Like the safetensors library: tensors tile the data section exactly, without gaps or
    # overlaps, so no bytes hide in the file that the header does not account for.
    position = 0
    for start, end, name in sorted(spans):
        if start != position:
            raise AdapterFormatError(f"{path.name}: tensor {name!r} overlaps or leaves a gap")
        position = end
    if position != data_len:
        raise AdapterFormatError(f"{path.name}: {data_len - position} bytes after the last tensor")
    return tensors


def inspect_adapter(folder: Path) -> AdapterInfo:
    """Read an adapter folder's config and tensor header; raises AdapterFormatError."""
    missing = [n for n in ADAPTER_FILES if not (folder / n).is_file()]
    if missing:
        raise AdapterFormatError(f"{folder}: missing {', '.join(missing)}")
    try:
        config = json.loads((folder / CONFIG_FILE).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterFormatError(f"{CONFIG_FILE} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise AdapterFormatError(f"{CONFIG_FILE} must hold a JSON object")
    peft_type = config.get("peft_type", "LORA")
    if str(peft_type).upper() != "LORA":
        raise AdapterFormatError(f"peft_type is {peft_type!r}; only LORA adapters are served")
    try:
        rank = int(config["r"])
        alpha = float(config.get("lora_alpha", rank))
    except (KeyError, TypeError, ValueError) as exc:
        raise AdapterFormatError(f"{CONFIG_FILE}: needs an integer 'r' (rank)") from exc
    if rank < 1:
        raise AdapterFormatError(f"{CONFIG_FILE}: rank r must be >= 1, got {rank}")
    # Per-module ranks would make tensor shapes differ from `r`; vLLM serves one rank.
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            raise AdapterFormatError(f"{CONFIG_FILE}: {key} is not supported; use one rank")
    modules = config.get("target_modules") or []
    if isinstance(modules, str):  # PEFT allows a regex string; we need explicit names.
        raise AdapterFormatError("target_modules must be a list of module names, not a regex")
    tensors = read_safetensors_header(folder / WEIGHTS_FILE)
    size = sum((folder / n).stat().st_size for n in ADAPTER_FILES)
    return AdapterInfo(
        rank=rank,
        alpha=alpha,
        target_modules=tuple(sorted(str(m) for m in modules)),
        base_model_name=config.get("base_model_name_or_path"),
        tensors=tuple(sorted(tensors.values(), key=lambda t: t.name)),
        size_bytes=size,
    )


def check_shapes(info: AdapterInfo, dims: BaseModelDims) -> ShapeReport:
    """Every LoRA tensor must fit the base model: lora_A is (r, in), lora_B is (out, r)."""
    report = ShapeReport()
    seen_modules: set[str] = set()
    halves: dict[tuple[int, str], set[str]] = {}
    for t in info.tensors:
        m = _TENSOR_NAME.search(t.name)
        if m is None:
            report.problems.append(f"unexpected tensor {t.name}")
            continue
        layer, module, ab = int(m["layer"]), m["module"], m["ab"]
        seen_modules.add(module)
        halves.setdefault((layer, module), set()).add(ab)
        if layer >= dims.num_layers:
            report.problems.append(f"{t.name}: layer {layer} >= base model's {dims.num_layers}")
        io = dims.io_dims(module)
        if io is None:
            report.problems.append(f"{t.name}: unknown module {module}")
            continue
        expected = (info.rank, io[0]) if ab == "A" else (io[1], info.rank)
        if t.shape != expected:
            report.problems.append(f"{t.name}: shape {list(t.shape)}, expected {list(expected)}")
    for (layer, module), found in sorted(halves.items()):
        if found != {"A", "B"}:
            missing = "B" if "A" in found else "A"
            report.problems.append(f"layer {layer} {module}: lora_{missing} is missing")
    undeclared = seen_modules - set(info.target_modules)
    if undeclared:
        report.problems.append(f"tensors for modules not in target_modules: {sorted(undeclared)}")
    if not info.tensors:
        report.problems.append("no LoRA tensors")
    return report


def framed_sha256(folder: Path, names: list[str]) -> str:
    """sha256 over each file as name + NUL + 8-byte big-endian size + bytes, in `names` order."""
    digest = hashlib.sha256()
    for name in names:
        path = folder / name
        digest.update(name.encode() + b"\0" + path.stat().st_size.to_bytes(8, "big"))
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def adapter_checksum(folder: Path) -> str:
    """`sha256:<hex>` of the adapter's two files, framed as described in the module docstring."""
    return framed_sha256(folder, list(ADAPTER_FILES))


def base_model_hash(model_dir: Path) -> str:
    """`sha256:<hex>` identifying a base model: config.json then every *.safetensors by name.

    Framed like the adapter checksum. Tokenizer files do not change the math and are left out.
    """
    return framed_sha256(
        model_dir, ["config.json", *sorted(p.name for p in model_dir.glob("*.safetensors"))]
    )
