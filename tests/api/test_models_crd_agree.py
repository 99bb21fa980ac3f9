"""The two copies of every constraint agree: whatever the CRD (schema + CEL, as the API server
evaluates them) accepts, the pydantic models accept, and the other way round."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lorafleet_core.api.crd_validation import schema_of, validate
from lorafleet_core.api.models import AdapterAlias, LoRAAdapter, ReplicaPool

from .conftest import examples_of_kind

MODELS = {"LoRAAdapter": LoRAAdapter, "AdapterAlias": AdapterAlias, "ReplicaPool": ReplicaPool}
SCHEMAS = {kind: schema_of(kind) for kind in MODELS}
AGREE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text close to the rules' edges: DNS-ish characters plus the ones that break them.
edgy_text = st.text(alphabet="abcxyz019-._/:AZ \n", max_size=70)
hexish = st.text(alphabet="0123456789abcdefABx", min_size=60, max_size=68)


def pydantic_accepts(kind: str, doc: dict[str, Any]) -> bool:
    try:
        MODELS[kind].model_validate(doc)
    except ValidationError:
        return False
    return True


def crd_accepts(kind: str, doc: dict[str, Any]) -> bool:
    return validate(SCHEMAS[kind], doc) == []


def mutate(kind: str, path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(examples_of_kind(kind)[0])
    node = doc
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    return doc


def check(kind: str, path: str, value: Any) -> None:
    doc = mutate(kind, path, value)
    assert crd_accepts(kind, doc) == pydantic_accepts(kind, doc), (path, value)


@AGREE
@given(value=edgy_text)
def test_tenant(value):
    check("LoRAAdapter", "spec.tenant", value)


@AGREE
@given(value=edgy_text)
def test_version(value):
    check("LoRAAdapter", "spec.version", value)


@AGREE
@given(value=st.integers(min_value=-3, max_value=300))
def test_rank(value):
    check("LoRAAdapter", "spec.rank", value)


@AGREE
@given(value=st.one_of(st.integers(-2, 5000), st.floats(-1, 5000, allow_nan=False)))
def test_alpha(value):
    check("LoRAAdapter", "spec.alpha", value)


@AGREE
@given(prefix=st.sampled_from(["sha256:", "sha512:", "", "SHA256:"]), digest=hexish)
def test_checksum(prefix, digest):
    check("LoRAAdapter", "spec.checksum", prefix + digest)


@AGREE
@given(
    scheme=st.sampled_from(["s3://", "file://", "http://", "https://", "s3:/", ""]), rest=edgy_text
)
def test_weights_uri(scheme, rest):
    check("LoRAAdapter", "spec.weightsUri", scheme + rest)


@AGREE
@given(
    value=st.lists(st.sampled_from(["q_proj", "v_proj", "o-proj", "1x", "gate_proj"]), max_size=4)
)
def test_target_modules(value):
    check("LoRAAdapter", "spec.targetModules", value)


@AGREE
@given(tenant=st.sampled_from(["acme", "acm", "globex", "Acme"]), name=edgy_text)
def test_alias_model(tenant, name):
    doc = mutate("AdapterAlias", "spec.model", f"{tenant}/{name}")
    assert crd_accepts("AdapterAlias", doc) == pydantic_accepts("AdapterAlias", doc)


@AGREE
@given(
    low=st.one_of(st.none(), st.integers(-1, 1002)),
    high=st.one_of(st.none(), st.integers(-1, 1002)),
)
def test_replica_bounds(low, high):
    replicas = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
    check("ReplicaPool", "spec.replicas", replicas)
