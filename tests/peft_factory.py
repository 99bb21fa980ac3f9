"""PEFT-format LoRA adapter folders with random weights, for tests that read files, not math.

The layout is what `peft.save_pretrained` writes (adapter_config.json + adapter_model.safetensors
with PEFT's tensor names); `tests/api/test_adapter_files.py` also checks one real PEFT folder.
Trained canaries (for tests that need vLLM to answer) come from lorafleet_demo.assets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from lorafleet_core.storage.adapter_files import BaseModelDims

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")


def tensor_name(layer: int, module: str, ab: str) -> str:
    block = "self_attn" if module in ATTN else "mlp"
    return f"base_model.model.model.layers.{layer}.{block}.{module}.lora_{ab}.weight"


def write_peft_adapter(
    folder: Path,
    dims: BaseModelDims,
    *,
    rank: int = 4,
    modules: Sequence[str] = ("q_proj", "v_proj"),
    seed: int = 0,
    dtype: type = np.float32,
    in_features_offset: int = 0,
    base_model_name: str = "tiny-llama",
    config: dict[str, Any] | None = None,
) -> Path:
    """Write an adapter fitting `dims` (or not: `in_features_offset` widens every lora_A).

    Modules the base model lacks get hidden x hidden tensors, so a test can build an adapter
    that is well-formed but targets a module a pool does not allow.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    for layer in range(dims.num_layers):
        for module in modules:
            d_in, d_out = dims.io_dims(module) or (dims.hidden_size, dims.hidden_size)
            a = rng.standard_normal((rank, d_in + in_features_offset), dtype=np.float32)
            tensors[tensor_name(layer, module, "A")] = a.astype(dtype)
            tensors[tensor_name(layer, module, "B")] = np.zeros((d_out, rank), dtype=dtype)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    cfg: dict[str, Any] = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": list(modules),
        "base_model_name_or_path": base_model_name,
        "task_type": "CAUSAL_LM",
        "rank_pattern": {},
        "alpha_pattern": {},
    }
    cfg.update(config or {})
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    return folder
