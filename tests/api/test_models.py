"""The CR models: constraints a user expects, camelCase wire format, every field described."""

from __future__ import annotations

import copy
import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from lorafleet_core.api.models import (
    AdapterAlias,
    AdapterAliasSpec,
    AdapterPhase,
    Condition,
    LoRAAdapter,
    LoRAAdapterSpec,
    ReplicaBounds,
    ReplicaPool,
)

GOOD_HASH = "sha256:" + "ab" * 32


def adapter_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tenant": "acme",
        "version": "v1",
        "baseModelHash": GOOD_HASH,
        "rank": 16,
        "alpha": 32,
        "targetModules": ["q_proj", "v_proj"],
        "weightsUri": "s3://bucket/acme/v1/",
        "checksum": GOOD_HASH,
    }
    spec.update(overrides)
    return spec


def test_valid_adapter_spec_parses_and_round_trips_in_camel_case():
    spec = LoRAAdapterSpec.model_validate(adapter_spec(sizeBytes=1024))
    assert spec.base_model_hash == GOOD_HASH
    assert spec.size_bytes == 1024
    wire = spec.wire()
    assert wire["baseModelHash"] == GOOD_HASH
    assert wire["weightsUri"] == "s3://bucket/acme/v1/"
    assert "base_model_hash" not in wire
    assert LoRAAdapterSpec.model_validate(wire) == spec


def test_snake_case_names_are_accepted_in_python():
    spec = LoRAAdapterSpec(
        tenant="acme",
        version="v1",
        base_model_hash=GOOD_HASH,
        rank=8,
        alpha=8,
        target_modules=["q_proj"],
        weights_uri="file:///adapters/acme/v1",
        checksum=GOOD_HASH,
    )
    assert spec.wire()["targetModules"] == ["q_proj"]


@pytest.mark.parametrize("rank", [1, 16, 256])
def test_rank_bounds_accept(rank):
    assert LoRAAdapterSpec.model_validate(adapter_spec(rank=rank)).rank == rank


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rank", 0),
        ("rank", 257),
        ("rank", 300),
        ("alpha", 0),
        ("checksum", "sha256:abc"),
        ("checksum", "md5:" + "a" * 32),
        ("checksum", "sha256:" + "A" * 64),  # upper-case hex is not the canonical form
        ("baseModelHash", "deadbeef"),
        ("weightsUri", "http://example.com/adapter"),
        ("weightsUri", "https://bucket.s3.amazonaws.com/x"),
        ("weightsUri", "/local/path"),
        ("weightsUri", "s3://"),
        ("tenant", "Acme"),
        ("tenant", "acme_corp"),
        ("tenant", "-acme"),
        ("tenant", "a" * 64),
        ("targetModules", []),
        ("targetModules", ["q_proj", "q_proj"]),
        ("targetModules", ["q-proj"]),
        ("version", ""),
    ],
)
def test_bad_adapter_spec_is_refused_naming_the_field(field, value):
    with pytest.raises(ValidationError) as info:
        LoRAAdapterSpec.model_validate(adapter_spec(**{field: value}))
    text = str(info.value)
    # Field errors name the field; the cross-field checks name the concept instead.
    assert field in text or "targetModules" in text


def test_unknown_spec_field_is_refused():
    with pytest.raises(ValidationError, match="extra"):
        LoRAAdapterSpec.model_validate(adapter_spec(rnak=16))


def test_alias_model_must_belong_to_the_tenant():
    ok = AdapterAliasSpec.model_validate(
        {"model": "acme/support:prod", "tenant": "acme", "adapter": "acme-support-v2"}
    )
    assert ok.model == "acme/support:prod"
    with pytest.raises(ValidationError, match="must start with 'acme/'"):
        AdapterAliasSpec.model_validate(
            {"model": "globex/support:prod", "tenant": "acme", "adapter": "acme-support-v2"}
        )
    # A tenant whose name is a prefix of another's must not pass either.
    with pytest.raises(ValidationError, match="must start with"):
        AdapterAliasSpec.model_validate(
            {"model": "acmecorp/support:prod", "tenant": "acme", "adapter": "x"}
        )


@pytest.mark.parametrize(
    "model", ["acme/support", "acme:prod", "acme/support:", "/support:prod", "Acme/support:prod"]
)
def test_alias_model_must_be_tenant_name_tag(model):
    with pytest.raises(ValidationError, match="model"):
        AdapterAliasSpec.model_validate({"model": model, "tenant": "acme", "adapter": "x"})


def test_replica_bounds_min_le_max():
    assert ReplicaBounds(min=3, max=3).min == 3
    with pytest.raises(ValidationError, match=r"min \(5\) must be <= replicas.max \(4\)"):
        ReplicaBounds.model_validate({"min": 5})


def test_pool_defaults_match_design(pool_manifest):
    pool = ReplicaPool.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {"baseModel": {"name": "m", "hash": GOOD_HASH, "uri": "file:///m"}},
        }
    )
    assert pool.spec.engine.gpu_slots == 250
    assert pool.spec.engine.max_rank == 16
    assert pool.spec.owners_per_adapter == 2
    assert pool.spec.replicas.min <= pool.spec.replicas.max


def test_condition_follows_kubernetes_conventions():
    cond = Condition.model_validate(
        {
            "type": "Validated",
            "status": "False",
            "reason": "RankTooHigh",
            "message": "rank 32 > pool maxRank 16",
            "lastTransitionTime": "2026-11-29T12:00:00Z",
            "observedGeneration": 1,
        }
    )
    assert cond.wire()["lastTransitionTime"] == "2026-11-29T12:00:00Z"
    with pytest.raises(ValidationError):
        Condition.model_validate({**cond.wire(), "status": "Maybe"})
    with pytest.raises(ValidationError):
        Condition.model_validate({**cond.wire(), "reason": "rank too high"})


def test_whole_objects_parse_from_manifests(adapter_manifest, alias_manifest, pool_manifest):
    adapter = LoRAAdapter.model_validate(adapter_manifest)
    assert adapter.metadata.name == adapter_manifest["metadata"]["name"]
    assert AdapterAlias.model_validate(alias_manifest).spec.tenant == adapter.spec.tenant
    assert ReplicaPool.model_validate(pool_manifest).spec.base_model.hash == (
        adapter.spec.base_model_hash
    )
    with_status = copy.deepcopy(adapter_manifest)
    with_status["status"] = {"phase": "Ready", "owners": ["pool-0", "pool-3"], "ownerCount": 2}
    parsed = LoRAAdapter.model_validate(with_status)
    assert parsed.status is not None
    assert parsed.status.phase is AdapterPhase.READY


def test_wrong_kind_is_refused(adapter_manifest):
    with pytest.raises(ValidationError, match="kind"):
        LoRAAdapter.model_validate({**adapter_manifest, "kind": "AdapterAlias"})


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


@pytest.mark.parametrize("root", [LoRAAdapter, AdapterAlias, ReplicaPool])
def test_every_field_is_described(root):
    """`kubectl explain` shows these descriptions: none may be missing."""
    seen: set[type[BaseModel]] = set()
    todo: list[type[BaseModel]] = [root]
    undocumented: list[str] = []
    while todo:
        model = todo.pop()
        if model in seen or model.__name__ == "ObjectMeta":
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            if name not in ("api_version", "kind", "metadata") and not field.description:
                undocumented.append(f"{model.__name__}.{name}")
            todo.extend(_models_in(field.annotation))
    assert len(seen) >= 3
    assert undocumented == []
