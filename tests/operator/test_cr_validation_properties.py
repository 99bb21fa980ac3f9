"""Hypothesis over whole custom resources, valid and invalid, against the CRD schema (+ CEL, as
the API server evaluates them: lorafleet_core.api.crd_validation) and the operator's own
re-validation and planners.

For every generated LoRAAdapter, AdapterAlias and ReplicaPool:
- the CRD and the operator's parse agree: what the schema refuses the operator refuses too
  (kmock and standalone manifests have no schema, so the operator must not trust one);
- an accepted object never crashes the planners: it gets Ready, or conditions that each carry
  a reason and a message;
- a refused one gets a status saying why (Rejected / InvalidSpec with a message), or is left
  out of the index (an alias);
- every status the planners write is itself accepted by the CRD's status schema (a status
  the API server refused would be retried for ever and never seen).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lorafleet_core.api.crd_validation import schema_of, unknown_fields, validate
from lorafleet_core.api.models import AdapterAlias, AdapterPhase, LoRAAdapter, ReplicaPoolStatus
from lorafleet_core.planning.adapters import Validation, parse_adapter
from lorafleet_core.planning.fleet import AdapterEntry, FleetSnapshot, plan_fleet
from lorafleet_core.planning.pool import clamp_replicas, plan_pool_objects
from lorafleet_core.planning.pool_status import PoolObservation, plan_pool_status
from lorafleet_operator.errors import describe
from lorafleet_operator.handlers.pools import parse_pool
from tests.api.conftest import examples_of_kind
from tests.operator.factories import BASE_HASH, T0, entry, pod_views, pool, sha

T = TypeVar("T")
SCHEMAS = {kind: schema_of(kind) for kind in ("LoRAAdapter", "AdapterAlias", "ReplicaPool")}
PROPS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = T0

text = st.text(alphabet="abcxyz019-._/:AZ \n", max_size=40)
hex64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
any_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)


def sometimes(valid: st.SearchStrategy[Any], *odd: st.SearchStrategy[Any]) -> Any:
    """Mostly a valid value, sometimes an edge or a wrong type."""
    return st.one_of(valid, valid, valid, *odd)


@st.composite
def mangled(draw: st.DrawFn, spec: dict[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    """`spec` with, now and then, a required field dropped or an unknown field added."""
    spec = dict(spec)
    if draw(st.integers(0, 9)) == 0 and required:
        spec.pop(draw(st.sampled_from(required)), None)
    if draw(st.integers(0, 9)) == 0:
        spec[draw(st.sampled_from(["extra", "Rank", "weightsURI"]))] = draw(any_json)
    return spec


MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@st.composite
def adapter_docs(draw: st.DrawFn) -> dict[str, Any]:
    spec = {
        "tenant": draw(sometimes(st.sampled_from(["acme", "globex-2"]), text, st.integers())),
        "version": draw(sometimes(st.sampled_from(["v1", "v2.0"]), text)),
        "baseModelHash": draw(
            sometimes(
                st.just(BASE_HASH), st.builds(lambda h: "sha256:" + h, hex64), text, st.none()
            )
        ),
        "rank": draw(sometimes(st.sampled_from([8, 16]), st.integers(-2, 300), st.just("8"))),
        "alpha": draw(sometimes(st.just(16), st.floats(-1, 1e6, allow_nan=False), st.just(True))),
        "targetModules": draw(
            sometimes(
                st.lists(st.sampled_from(MODULES), min_size=1, max_size=7, unique=True),
                st.lists(st.sampled_from([*MODULES, "lm_head", "Q", ""]), max_size=9),
                text,
            )
        ),
        "weightsUri": draw(
            sometimes(
                st.sampled_from(["s3://adapters/a/", "file:///data/a"]),
                st.builds(
                    lambda s, r: s + r, st.sampled_from(["s3://", "https://", "file:", ""]), text
                ),
            )
        ),
        "checksum": draw(
            sometimes(st.builds(lambda h: "sha256:" + h, hex64), text, st.just(sha("x").upper()))
        ),
    }
    if draw(st.booleans()):
        spec["sizeBytes"] = draw(st.one_of(st.integers(-5, 2**40), st.just("1Gi")))
    required = ("tenant", "version", "baseModelHash", "rank", "targetModules", "weightsUri")
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": "prop-adapter", "namespace": "ns", "generation": 1},
        "spec": draw(mangled(spec, (*required, "checksum"))),
    }


@st.composite
def alias_docs(draw: st.DrawFn) -> dict[str, Any]:
    tenant = draw(sometimes(st.just("acme"), st.just("Acme"), text))
    name = draw(sometimes(st.sampled_from(["support:prod", "bot:canary", "bot"]), text))
    spec = {
        "model": draw(
            sometimes(st.just(f"{tenant}/{name}"), st.just(f"globex/{name}"), text, st.integers())
        ),
        "tenant": tenant,
        "adapter": draw(sometimes(st.sampled_from(["good", "missing"]), text, st.none())),
    }
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "AdapterAlias",
        "metadata": {
            "name": "prop-alias",
            "namespace": "ns",
            "creationTimestamp": "2026-11-29T12:00:00Z",
        },
        "spec": draw(mangled(spec, ("model", "tenant", "adapter"))),
    }


@st.composite
def pool_docs(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(examples_of_kind("ReplicaPool")[0])
    spec = doc["spec"]
    spec["baseModel"]["hash"] = draw(sometimes(st.just(BASE_HASH), text))
    engine = spec.setdefault("engine", {})
    engine["gpuSlots"] = draw(sometimes(st.integers(1, 300), st.integers(-1, 5000), st.just("4")))
    engine["hostRamSlots"] = draw(sometimes(st.integers(1, 2000), st.integers(-1, 10**6)))
    engine["maxRank"] = draw(sometimes(st.sampled_from([8, 16, 64]), st.integers(-1, 1000)))
    engine["allowedTargetModules"] = draw(
        sometimes(st.lists(st.sampled_from(MODULES), min_size=1, unique=True), st.lists(text))
    )
    low = draw(sometimes(st.integers(0, 4), st.integers(-2, 1002), st.none()))
    high = draw(sometimes(st.integers(4, 30), st.integers(-2, 1002), st.none()))
    spec["replicas"] = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
    spec["ownersPerAdapter"] = draw(sometimes(st.integers(1, 5), st.integers(-1, 100)))
    auto = spec.setdefault("autoscaling", {})
    auto["targetTokensInFlight"] = draw(sometimes(st.integers(1, 10**5), st.integers(-5, 0)))
    auto["scaleDownStabilizationSeconds"] = draw(
        sometimes(st.integers(0, 600), st.integers(-10, -1), st.floats(-1, 1e4, allow_nan=False))
    )
    doc["spec"] = draw(mangled(spec, ("baseModel", "engine")))
    doc["metadata"] = {"name": "prop-pool", "namespace": "ns", "generation": 3}
    return doc


def crd_accepts(kind: str, doc: dict[str, Any]) -> list[str]:
    """What `kubectl apply` (strict field validation, the default) and the API server say."""
    return unknown_fields(SCHEMAS[kind], doc) + validate(SCHEMAS[kind], doc)


def status_errors(kind: str, status: dict[str, Any]) -> list[str]:
    """What the CRD says of `status` written onto a valid object of `kind`."""
    host = copy.deepcopy(examples_of_kind(kind)[0])
    host["status"] = status
    return validate(SCHEMAS[kind], host)


def parsed_or_refusal(parse: Callable[[Any], T], doc: dict[str, Any]) -> tuple[T | None, str]:
    """(the parsed object, "") or (None, why), as the operator describes a refusal."""
    try:
        return parse(doc), ""
    except ValidationError as exc:
        return None, describe(exc)


def explained(conditions: list[Any]) -> None:
    """Every condition has a reason; a Ready condition that is not True says why."""
    assert conditions
    for c in conditions:
        assert c.reason, c
    ready = next(c for c in conditions if c.type == "Ready")
    if ready.status != "True":
        assert ready.message, ready


@PROPS
@given(doc=adapter_docs())
def test_adapter_schema_and_operator_agree_and_every_outcome_is_a_status(doc):
    errors = crd_accepts("LoRAAdapter", doc)
    parsed = parse_adapter(doc)
    if errors:
        assert isinstance(parsed, Validation), ("the CRD refuses, the operator took it", errors)
        assert parsed.final
        assert parsed.reason
        assert parsed.message
        item = AdapterEntry(name="prop-adapter", adapter=None, invalid=parsed, generation=1)
    else:
        assert isinstance(parsed, LoRAAdapter), ("the CRD accepts, the operator refused", parsed)
        item = AdapterEntry(name="prop-adapter", adapter=parsed, generation=1)
    snap = FleetSnapshot(pools=[pool()], adapters=[item], aliases=[], pods=pod_views("pool", 3))
    status = plan_fleet(snap, NOW).adapter_status["prop-adapter"]
    if errors:
        assert status.phase == AdapterPhase.REJECTED
    assert status.phase in {AdapterPhase.READY, AdapterPhase.REJECTED, AdapterPhase.PENDING}
    explained(status.conditions)
    if status.phase != AdapterPhase.READY:
        assert any(c.status == "False" for c in status.conditions)
    assert status_errors("LoRAAdapter", status.wire()) == []


@PROPS
@given(doc=alias_docs())
def test_alias_schema_and_operator_agree_and_an_accepted_one_gets_explained_conditions(doc):
    errors = crd_accepts("AdapterAlias", doc)
    alias, refusal = parsed_or_refusal(AdapterAlias.model_validate, doc)
    if alias is None:
        assert errors, ("the CRD accepts, the operator refused", refusal)
        return  # FleetSync.upsert_alias leaves it out of the index (logged)
    assert not errors, ("the CRD refuses, the operator took it", errors)
    adapters = [entry("good", tenant="acme")]
    snap = FleetSnapshot(
        pools=[pool()], adapters=adapters, aliases=[alias], pods=pod_views("pool", 2)
    )
    status = plan_fleet(snap, NOW).alias_status["prop-alias"]
    explained(status.conditions)
    assert status_errors("AdapterAlias", status.wire()) == []


@PROPS
@given(doc=pool_docs())
def test_pool_schema_and_operator_agree_and_every_outcome_is_a_status(doc):
    errors = crd_accepts("ReplicaPool", doc)
    parsed, refusal = parsed_or_refusal(parse_pool, doc)
    if parsed is None:
        assert errors, ("the CRD accepts, the operator refused", refusal)
        status = plan_pool_status(
            "prop-pool", ReplicaPoolStatus(), None, PoolObservation(), NOW, invalid=refusal
        )
        assert any(c.reason == "InvalidSpec" and c.message for c in status.conditions)
    else:
        assert not errors, ("the CRD refuses, the operator took it", errors)
        objects = plan_pool_objects(parsed, "ns", clamp_replicas(parsed, None))
        assert objects.statefulset["spec"]["replicas"] == clamp_replicas(parsed, None)
        snap = FleetSnapshot(
            pools=[parsed],
            adapters=[entry("a0", base_hash=parsed.spec.base_model.hash)],
            aliases=[],
            pods=pod_views("prop-pool", 2),
        )
        explained(plan_fleet(snap, NOW).adapter_status["a0"].conditions)
        status = plan_pool_status(
            "prop-pool", ReplicaPoolStatus(), parsed, PoolObservation(), NOW, generation=3
        )
    explained(status.conditions)
    assert status_errors("ReplicaPool", status.wire()) == []
