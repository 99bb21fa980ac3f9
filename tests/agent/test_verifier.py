"""Verification before vLLM sees an adapter: record checks and file checks (no vLLM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lorafleet_agent.verifier import PoolPolicy, VerificationError, check_files, check_record
from lorafleet_core.storage.adapter_files import BaseModelDims, adapter_checksum
from lorafleet_core.wire.records import AdapterRecord

DIMS = BaseModelDims(
    hidden_size=16,
    intermediate_size=32,
    num_layers=1,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=8,
)
BASE = "sha256:" + "a" * 64
POLICY = PoolPolicy(
    base_model_hash=BASE,
    max_rank=8,
    allowed_target_modules=frozenset({"q_proj", "v_proj"}),
    dims=DIMS,
)


def write_adapter(folder: Path, rank: int = 4, q_in: int = 16) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    prefix = "base_model.model.model.layers.0.self_attn"
    tensors = {
        f"{prefix}.q_proj.lora_A.weight": torch.zeros(rank, q_in),
        f"{prefix}.q_proj.lora_B.weight": torch.zeros(16, rank),
        f"{prefix}.v_proj.lora_A.weight": torch.zeros(rank, 16),
        f"{prefix}.v_proj.lora_B.weight": torch.zeros(16, rank),
    }
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": ["q_proj", "v_proj"],
    }
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def record(folder: Path, **overrides: object) -> AdapterRecord:
    fields: dict[str, object] = {
        "id": "a1",
        "tenant": "t",
        "base_model_hash": BASE,
        "rank": 4,
        "alpha": 8.0,
        "target_modules": ("q_proj", "v_proj"),
        "weights_uri": "file:///x/",
        "checksum": adapter_checksum(folder),
    }
    fields.update(overrides)
    return AdapterRecord.model_validate(fields)


def test_a_good_adapter_passes(tmp_path):
    folder = write_adapter(tmp_path / "good")
    rec = record(folder)
    check_record(rec, POLICY)
    check_files(folder, rec, POLICY)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"base_model_hash": "sha256:" + "b" * 64}, "BaseModelMismatch"),
        ({"rank": 9}, "RankTooHigh"),
        ({"target_modules": ("q_proj", "lm_head")}, "TargetModulesNotAllowed"),
    ],
)
def test_record_refusals_need_no_download(tmp_path, overrides, reason):
    folder = write_adapter(tmp_path / "a")
    with pytest.raises(VerificationError) as err:
        check_record(record(folder, **overrides), POLICY)
    assert err.value.reason == reason


def test_file_refusals(tmp_path):
    good = write_adapter(tmp_path / "good")
    rec = record(good)
    weights = good / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(VerificationError) as err:
        check_files(good, rec, POLICY)
    assert err.value.reason == "ChecksumMismatch"

    wrong_shape = write_adapter(tmp_path / "shape", q_in=24)
    with pytest.raises(VerificationError) as err:
        check_files(wrong_shape, record(wrong_shape), POLICY)
    assert err.value.reason == "ShapeMismatch"
    assert "q_proj.lora_A" in str(err.value)

    wide = write_adapter(tmp_path / "wide", rank=16)
    with pytest.raises(VerificationError) as err:  # the record lies (rank 4), the files do not
        check_files(wide, record(wide), POLICY)
    assert err.value.reason == "RankTooHigh"

    other_rank = write_adapter(tmp_path / "r2", rank=2)
    with pytest.raises(VerificationError) as err:
        check_files(other_rank, record(other_rank), POLICY)
    assert err.value.reason == "RankMismatch"
