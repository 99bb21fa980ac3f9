"""A base-model config, PEFT adapter folders and a manifests folder, for CLI and standalone tests.

The fixtures `base_model` and `folder` are imported by the conftest of each of those folders.

Adapters here are real PEFT-format folders (adapter_config.json + safetensors with lora_A/B
tensors named as PEFT names them) with random weights: the CLI reads headers and shapes, never
the math, so training is not needed for these tests (the end-to-end test uses trained canaries).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from lorafleet_core.api.models import ALL_TARGET_MODULES
from lorafleet_core.storage.adapter_files import BaseModelDims, base_model_hash
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_standalone.reconciler import Reconciler
from tests.peft_factory import write_peft_adapter

HIDDEN, INTERMEDIATE, LAYERS, HEADS = 64, 128, 2, 1
DIMS = BaseModelDims(
    hidden_size=HIDDEN,
    intermediate_size=INTERMEDIATE,
    num_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=HEADS,
    head_dim=HIDDEN // HEADS,
)


def make_base_model(folder: Path) -> Path:
    """A base model folder: a Llama config.json and a small safetensors (hashable)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "vocab_size": 32,
    }
    (folder / "config.json").write_text(json.dumps(config))
    save_file(
        {"embed": np.zeros((32, HIDDEN), dtype=np.float32)}, str(folder / "model.safetensors")
    )
    return folder


def make_adapter(
    folder: Path,
    *,
    rank: int = 4,
    modules: Sequence[str] = ("q_proj", "v_proj"),
    wrong_shape: bool = False,
    seed: int = 0,
) -> Path:
    """A PEFT LoRA folder for the base model of `make_base_model`, plus a README as PEFT writes."""
    write_peft_adapter(
        folder,
        DIMS,
        rank=rank,
        modules=modules,
        seed=seed,
        in_features_offset=8 if wrong_shape else 0,
        base_model_name="test-base",
    )
    (folder / "README.md").write_text("not part of the adapter")
    return folder


def pool_hash(folder: Path) -> str:
    """The base-model hash of the folder's ReplicaPool `main`."""
    pool = load_folder(folder).find("ReplicaPool", "main")
    assert pool is not None
    return str(pool.body["spec"]["baseModel"]["hash"])


def find_body(folder: Path, kind: str, name: str) -> dict[str, Any]:
    found = load_folder(folder).find(kind, name)
    assert found is not None, f"{kind}/{name} not in {folder}"
    return found.body


def pool_manifest(name: str, base: Path, *, max_rank: int = 8, owners: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "ReplicaPool",
        "metadata": {"name": name},
        "spec": {
            "baseModel": {
                "name": "test-base",
                "hash": base_model_hash(base),
                "uri": f"file://{base}",
            },
            "engine": {
                "gpuSlots": 2,
                "hostRamSlots": 4,
                "maxRank": max_rank,
                "allowedTargetModules": list(ALL_TARGET_MODULES),
            },
            "ownersPerAdapter": owners,
            # adapter_manifest's fake locations and the stores the push tests use.
            "adapterSources": [
                "file:///store/",
                f"file://{base.parent / 'store'}",
                "s3://adapters/fleet/",
                "s3://shared-store/fleet/",
            ],
        },
    }


def adapter_manifest(
    name: str, tenant: str, base_hash: str, *, rank: int = 4, version: str = "v1"
) -> dict[str, Any]:
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": name},
        "spec": {
            "tenant": tenant,
            "version": version,
            "baseModelHash": base_hash,
            "rank": rank,
            "alpha": 8,
            "targetModules": ["q_proj", "v_proj"],
            "weightsUri": f"file:///store/{tenant}/{name}/",
            "checksum": "sha256:" + "a" * 64,
        },
    }


def alias_manifest(name: str, model: str, adapter: str) -> dict[str, Any]:
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "AdapterAlias",
        "metadata": {"name": name},
        "spec": {"model": model, "tenant": model.split("/")[0], "adapter": adapter},
    }


@pytest.fixture
def base_model(tmp_path: Path) -> Path:
    return make_base_model(tmp_path / "base")


@pytest.fixture
def folder(tmp_path: Path, base_model: Path) -> Path:
    """A manifests folder holding one ReplicaPool `main` (maxRank 8)."""
    out = tmp_path / "manifests"
    out.mkdir()
    write_object(out, pool_manifest("main", base_model))
    return out


REPLICAS = ("main-0", "main-1")


def reconcile_once(folder: Path, failed: dict[str, str] | None = None) -> Reconciler:
    """One pass of the standalone reconciler, as a running `lorafleet up` would make.

    `failed`: adapter -> reason every replica reports it refused (what makes it Failed); the
    replicas hold every other adapter's verified files on disk (a deploy needs that proof).
    """
    state = folder.parent / "up-state"
    files = {r: state / r / "annotations" for r in REPLICAS}
    rec = Reconciler(folder, files, state / "reconcile.json", say=lambda _m: None)
    refused = dict(failed or {})
    held = [o.name for o in load_folder(folder).of_kind("LoRAAdapter") if o.name not in refused]
    states = {
        r: ReplicaState(replica_id=r, failed_adapters=refused, disk_adapters=held) for r in REPLICAS
    }
    rec.reconcile(states)
    return rec
