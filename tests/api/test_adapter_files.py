"""PEFT adapter folders: inspection from the header only, shape checks, the checksum."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from lorafleet_core.api.models import SHA256_REF
from lorafleet_core.storage.adapter_files import (
    AdapterFormatError,
    BaseModelDims,
    adapter_checksum,
    base_model_hash,
    check_shapes,
    inspect_adapter,
    read_safetensors_header,
)
from tests.peft_factory import tensor_name, write_peft_adapter

DIMS = BaseModelDims(
    hidden_size=128,
    intermediate_size=256,
    num_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
)


def make_adapter(
    folder: Path,
    *,
    rank: int = 4,
    modules: tuple[str, ...] = ("q_proj", "v_proj"),
    dims: BaseModelDims = DIMS,
    config: dict[str, Any] | None = None,
    dtype: type = np.float32,
    seed: int = 0,
) -> Path:
    return write_peft_adapter(
        folder, dims, rank=rank, modules=modules, config=config, dtype=dtype, seed=seed
    )


def write_raw_safetensors(path: Path, header: Any, data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


# --- inspect ------------------------------------------------------------------------------------


def test_inspect_reads_config_and_header(tmp_path):
    folder = make_adapter(tmp_path / "a", rank=8, modules=("q_proj", "k_proj", "down_proj"))
    info = inspect_adapter(folder)
    assert info.rank == 8
    assert info.alpha == 16.0
    assert info.target_modules == ("down_proj", "k_proj", "q_proj")
    assert info.base_model_name == "tiny-llama"
    assert len(info.tensors) == 2 * 3 * 2
    shapes = {t.name: t.shape for t in info.tensors}
    assert shapes[tensor_name(0, "k_proj", "B")] == (64, 8)  # one KV head of 64
    assert shapes[tensor_name(1, "down_proj", "A")] == (8, 256)
    assert {t.dtype for t in info.tensors} == {"F32"}
    assert info.size_bytes == sum(p.stat().st_size for p in folder.iterdir())


def test_inspect_does_not_read_tensor_data(tmp_path):
    """A huge data section is never read: inspection stays cheap for an 80 MB adapter."""
    folder = make_adapter(tmp_path / "a")
    weights = folder / "adapter_model.safetensors"
    header = read_safetensors_header(weights)
    # Corrupting tensor bytes (not the header) leaves inspection unchanged ...
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0xFF
    weights.write_bytes(bytes(raw))
    assert read_safetensors_header(weights) == header
    # ... while the checksum sees it (below).


def test_shapes_match_the_base_model(tmp_path):
    folder = make_adapter(
        tmp_path / "a",
        modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    )
    report = check_shapes(inspect_adapter(folder), DIMS)
    assert report.ok, report.problems


def test_shapes_from_another_base_model_are_refused(tmp_path):
    other = BaseModelDims(
        hidden_size=256,
        intermediate_size=512,
        num_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
    )
    folder = make_adapter(tmp_path / "a", dims=other)
    report = check_shapes(inspect_adapter(folder), DIMS)
    assert not report.ok
    assert any(
        "q_proj.lora_A.weight: shape [4, 256], expected [4, 128]" in p for p in report.problems
    )


def test_too_many_layers_and_missing_halves_are_reported(tmp_path):
    deeper = BaseModelDims(**{**DIMS.__dict__, "num_layers": 3})
    folder = make_adapter(tmp_path / "a", dims=deeper)
    report = check_shapes(inspect_adapter(folder), DIMS)
    assert any("layer 2 >= base model's 2" in p for p in report.problems)

    half = tmp_path / "half"
    make_adapter(half)
    from safetensors.numpy import load_file

    tensors = load_file(str(half / "adapter_model.safetensors"))
    del tensors[tensor_name(1, "v_proj", "B")]
    save_file(tensors, str(half / "adapter_model.safetensors"))
    report = check_shapes(inspect_adapter(half), DIMS)
    assert report.problems == ["layer 1 v_proj: lora_B is missing"]


def test_rank_in_config_must_match_tensors(tmp_path):
    folder = make_adapter(tmp_path / "a", rank=4, config={"r": 8})
    report = check_shapes(inspect_adapter(folder), DIMS)
    assert any("expected [8, 128]" in p for p in report.problems)


def test_undeclared_modules_are_reported(tmp_path):
    folder = make_adapter(
        tmp_path / "a", modules=("q_proj", "v_proj"), config={"target_modules": ["q_proj"]}
    )
    report = check_shapes(inspect_adapter(folder), DIMS)
    assert report.problems == ["tensors for modules not in target_modules: ['v_proj']"]


def test_dims_from_a_hugging_face_config(tmp_path):
    config = {
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert BaseModelDims.from_model_dir(tmp_path) == DIMS


# --- bad folders --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"peft_type": "IA3"}, "only LORA"),
        ({"r": "four"}, "integer 'r'"),
        ({"r": 0}, "rank r must be >= 1"),
        ({"target_modules": ".*proj"}, "not a regex"),
        ({"rank_pattern": {"q_proj": 8}}, "rank_pattern is not supported"),
    ],
)
def test_bad_config_is_refused(tmp_path, change, message):
    folder = make_adapter(tmp_path / "a", config=change)
    with pytest.raises(AdapterFormatError, match=message):
        inspect_adapter(folder)


def test_missing_files_and_bad_json(tmp_path):
    folder = make_adapter(tmp_path / "a")
    (folder / "adapter_config.json").write_text("{not json")
    with pytest.raises(AdapterFormatError, match="not valid JSON"):
        inspect_adapter(folder)
    (folder / "adapter_config.json").unlink()
    with pytest.raises(AdapterFormatError, match=r"missing adapter_config\.json"):
        inspect_adapter(folder)


GOOD_ENTRY = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x01\x02", "too short"),
        (struct.pack("<Q", 10**12) + b"{}", "implausible"),
        (struct.pack("<Q", 4) + b"\xff\xfe\x00\x01", "not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    ],
)
def test_bad_safetensors_headers(tmp_path, raw, message):
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(raw)
    with pytest.raises(AdapterFormatError, match=message):
        read_safetensors_header(path)


@pytest.mark.parametrize(
    ("entry", "data_len", "message"),
    [
        ({"dtype": "F32", "shape": [2, 2]}, 16, "bad entry"),
        ({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}, 16, "do not match its shape"),
        ({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}, 8, "do not match its shape"),
        ({"dtype": "Q4", "shape": [2, 2], "data_offsets": [0, 16]}, 16, "unknown dtype"),
        (GOOD_ENTRY, 20, "4 bytes after the last tensor"),
    ],
)
def test_bad_tensor_entries(tmp_path, entry, data_len, message):
    path = tmp_path / "adapter_model.safetensors"
    write_raw_safetensors(path, {"t": entry}, b"\0" * data_len)
    with pytest.raises(AdapterFormatError, match=message):
        read_safetensors_header(path)


def test_overlapping_tensors_are_refused(tmp_path):
    path = tmp_path / "adapter_model.safetensors"
    write_raw_safetensors(path, {"a": GOOD_ENTRY, "b": GOOD_ENTRY}, b"\0" * 16)
    with pytest.raises(AdapterFormatError, match="overlaps or leaves a gap"):
        read_safetensors_header(path)


def test_metadata_entry_is_ignored(tmp_path):
    path = tmp_path / "adapter_model.safetensors"
    write_raw_safetensors(path, {"__metadata__": {"format": "pt"}, "t": GOOD_ENTRY}, b"\0" * 16)
    assert list(read_safetensors_header(path)) == ["t"]


# --- checksum -----------------------------------------------------------------------------------


def reference_checksum(folder: Path) -> str:
    """The definition in docs/reference/api.md, written out independently."""
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        data = (folder / name).read_bytes()
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return "sha256:" + digest.hexdigest()


def test_checksum_follows_the_documented_definition(tmp_path):
    folder = make_adapter(tmp_path / "a")
    checksum = adapter_checksum(folder)
    assert checksum == reference_checksum(folder)
    import re

    assert re.match(SHA256_REF, checksum)


def test_checksum_ignores_other_files_and_location(tmp_path):
    a = make_adapter(tmp_path / "a")
    b = make_adapter(tmp_path / "elsewhere" / "b")
    (b / "README.md").write_text("notes")
    assert adapter_checksum(a) == adapter_checksum(b)


@pytest.mark.parametrize("name", ["adapter_config.json", "adapter_model.safetensors"])
def test_a_flipped_byte_changes_the_checksum(tmp_path, name):
    folder = make_adapter(tmp_path / "a")
    before = adapter_checksum(folder)
    path = folder / name
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    assert adapter_checksum(folder) != before


def test_checksum_distinguishes_adapters(tmp_path):
    assert adapter_checksum(make_adapter(tmp_path / "a", seed=1)) != adapter_checksum(
        make_adapter(tmp_path / "b", seed=2)
    )


def test_moving_bytes_between_files_changes_the_checksum(tmp_path):
    """Length framing: the same concatenated bytes split differently hash differently."""
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, (cfg, weights) in ((one, (b"{}x", b"yz")), (two, (b"{}", b"xyz"))):
        folder.mkdir()
        (folder / "adapter_config.json").write_bytes(cfg)
        (folder / "adapter_model.safetensors").write_bytes(weights)
    assert adapter_checksum(one) != adapter_checksum(two)


def test_base_model_hash_covers_config_and_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "tokenizer.json").write_text("{}")
    first = base_model_hash(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"changed": true}')
    assert base_model_hash(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"weightz")
    assert base_model_hash(tmp_path) != first


# --- a real PEFT adapter ------------------------------------------------------------------------


def test_real_peft_adapter_inspects_and_fits(tmp_path):
    """What `peft` itself writes (tiny random Llama, no training) passes inspection and shapes."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=64,
    )
    modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(
        LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules=modules)
    )
    model.save_pretrained(str(tmp_path / "adapter"))
    info = inspect_adapter(tmp_path / "adapter")
    assert info.rank == 4
    assert info.target_modules == tuple(sorted(modules))
    assert len(info.tensors) == 2 * 7 * 2
    report = check_shapes(info, BaseModelDims.from_config(config.to_dict()))
    assert report.ok, report.problems
    assert check_shapes(info, DIMS).ok
    wrong = BaseModelDims(**{**DIMS.__dict__, "num_key_value_heads": 2})
    assert not check_shapes(info, wrong).ok
