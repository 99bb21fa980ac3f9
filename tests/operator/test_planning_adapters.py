from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lorafleet_core.api import reasons as R
from lorafleet_core.api.models import AdapterPhase, ConditionStatus
from lorafleet_core.planning import adapters as A
from lorafleet_core.planning.conditions import find
from tests.operator.factories import OTHER_HASH, T0, adapter, adapter_body, pool


def test_no_pool_yet_is_pending_not_final():
    v = A.validate_adapter(adapter("a").spec, [])
    assert (v.ok, v.reason, v.final) == (False, R.NO_MATCHING_POOL, False)


def test_base_model_mismatch_is_final_and_names_served_hashes():
    v = A.validate_adapter(adapter("a", base_hash=OTHER_HASH).spec, [pool()])
    assert (v.reason, v.final) == (R.BASE_MODEL_MISMATCH, True)
    assert "sha256:bbbb" in v.message


def test_rank_too_high_names_the_limit():
    v = A.validate_adapter(adapter("a", rank=32).spec, [pool(engine={"maxRank": 16})])
    assert (v.ok, v.reason, v.final) == (False, R.RANK_TOO_HIGH, True)
    assert "maxRank 16" in v.message


def test_target_module_not_allowed():
    p = pool(engine={"allowedTargetModules": ["q_proj", "v_proj"]})
    v = A.validate_adapter(adapter("a", modules=["q_proj", "gate_proj"]).spec, [p])
    assert v.reason == R.TARGET_MODULES_NOT_ALLOWED
    assert "gate_proj" in v.message


def test_parse_maps_bad_fields_to_reasons():
    bad_uri = A.parse_adapter(adapter_body("a", weightsUri="http://evil/x"))
    assert isinstance(bad_uri, A.Validation)
    assert bad_uri.reason == R.UNSUPPORTED_URI_SCHEME
    bad_sum = A.parse_adapter(adapter_body("a", checksum="md5:abc"))
    assert isinstance(bad_sum, A.Validation)
    assert bad_sum.reason == R.INVALID_CHECKSUM
    body = adapter_body("a")
    del body["spec"]["rank"]
    missing = A.parse_adapter(body)
    assert isinstance(missing, A.Validation)
    assert missing.reason == R.INVALID_SPEC
    assert missing.final


def test_owner_count_grows_with_traffic_and_shrinks_with_hysteresis():
    # capacity 1000 tok/s, one owner may carry 500 tok/s of one adapter.
    assert A.plan_owner_count(0, None, 2, 1000, 26) == 2
    assert A.plan_owner_count(1600, None, 2, 1000, 26) == 4
    # Falling just below the 3-owner limit keeps 4 (within the 20% headroom)...
    assert A.plan_owner_count(1400, 4, 2, 1000, 26) == 4
    # ...and well below it shrinks.
    assert A.plan_owner_count(900, 4, 2, 1000, 26) == 2
    # More owners than replicas is pointless; fewer than ownersPerAdapter is never planned.
    assert A.plan_owner_count(1e6, None, 2, 1000, 5) == 5
    assert A.plan_owner_count(0, None, 3, 1000, 1) == 3


def test_owner_count_with_no_traffic_figure_yet_stays_where_it_is():
    # A restarted operator plans before its first scrape: unknown is not zero traffic.
    assert A.plan_owner_count(None, 4, 2, 1000, 26) == 4
    assert A.plan_owner_count(0, 4, 2, 1000, 26) == 2
    assert A.plan_owner_count(None, None, 2, 1000, 26) == 2  # a new adapter: the default
    assert A.plan_owner_count(None, 9, 2, 1000, 5) == 5  # still never above the replicas


@given(
    tps=st.none() | st.floats(0, 1e6),
    current=st.none() | st.integers(1, 40),
    opa=st.integers(1, 16),
    replicas=st.integers(0, 40),
)
def test_owner_count_bounds(tps, current, opa, replicas):
    k = A.plan_owner_count(tps, current, opa, 2000, replicas)
    assert k >= opa
    if replicas > 0:
        assert k <= max(opa, replicas)


@given(a=st.floats(0, 1e5), b=st.floats(0, 1e5))
def test_owner_count_monotonic_in_traffic(a, b):
    lo, hi = sorted((a, b))
    assert A.plan_owner_count(lo, None, 2, 2000, 26) <= A.plan_owner_count(hi, None, 2, 2000, 26)


def _status(ad, v, owners=(), failed=None, blocked=()):
    inputs = A.AdapterInputs(
        validation=v,
        owners=list(owners),
        owner_count=2,
        ready_replicas=3,
        failed_on=failed or {},
        blocked_by_aliases=list(blocked),
    )
    return A.plan_adapter_status(ad, inputs, T0)


def test_status_ready_with_owners_and_conditions():
    v = A.Validation(True, R.VALID, "ok", pool="pool")
    s = _status(adapter("a"), v, owners=["pool-1", "pool-2"])
    assert s.phase == AdapterPhase.READY
    assert s.owners == ["pool-1", "pool-2"]
    assert s.owner_count == 2
    for t in (R.VALIDATED, R.PLACED, R.READY):
        c = find(s.conditions, t)
        assert c is not None
        assert c.status == ConditionStatus.TRUE


def test_status_pending_without_replicas():
    v = A.Validation(True, R.VALID, "ok", pool="pool")
    s = _status(adapter("a"), v)
    assert s.phase == AdapterPhase.PENDING
    placed = find(s.conditions, R.PLACED)
    assert placed is not None
    assert placed.reason == "NoReadyReplicas"


def test_rejected_by_a_pool_turns_ready_once_a_pool_accepts_it():
    ad = adapter("a")
    rejected = _status(ad, A.Validation(False, R.RANK_TOO_HIGH, "too big", final=True))
    assert rejected.phase == AdapterPhase.REJECTED
    ready = find(rejected.conditions, R.READY)
    assert ready is not None
    assert ready.message == "too big"
    # The same verdict again rewrites nothing (times kept).
    ad.status = rejected
    later = T0 + timedelta(minutes=5)
    same = A.plan_adapter_status(
        ad, A.AdapterInputs(A.Validation(False, R.RANK_TOO_HIGH, "too big", final=True)), later
    )
    assert same == rejected
    # A pool that accepts it (a new rank class, the pool recreated) un-rejects it.
    again = _status(ad, A.Validation(True, R.VALID, "ok", pool="pool"), owners=["pool-0"])
    assert again.phase == AdapterPhase.READY


def test_failed_when_every_owner_refused_it():
    v = A.Validation(True, R.VALID, "ok", pool="pool")
    s = _status(adapter("a"), v, owners=["p-0", "p-1"], failed={"p-0": "bad", "p-1": "bad"})
    assert s.phase == AdapterPhase.FAILED
    ready = find(s.conditions, R.READY)
    assert ready is not None
    assert ready.reason == "ReplicaRejected"
    assert "p-0: bad" in ready.message
    partly = _status(adapter("a"), v, owners=["p-0", "p-1"], failed={"p-0": "bad"})
    assert partly.phase == AdapterPhase.READY


def test_deletion_blocked_condition_names_aliases():
    v = A.Validation(True, R.VALID, "ok", pool="pool")
    s = _status(adapter("a"), v, owners=["p-0"], blocked=["prod", "canary"])
    c = find(s.conditions, R.DELETION_BLOCKED)
    assert c is not None
    assert c.reason == "ReferencedByAlias"
    assert "canary, prod" in c.message


def test_a_pool_with_adapter_sources_refuses_weights_outside_the_tenants_folder():
    sources = ["s3://fleet-adapters/lorafleet/", "file:///srv/adapters"]
    p = pool(adapterSources=sources)
    ok = [
        "s3://fleet-adapters/lorafleet/acme/support/v1/",
        "file:///srv/adapters/acme/support/v1/",
    ]
    outside = [
        "s3://fleet-adapters/lorafleet/globex/secret/v1/",  # another tenant's files
        "s3://fleet-adapters/lorafleet/acme-evil/x/",  # a look-alike prefix
        "s3://other-bucket/lorafleet/acme/x/",
        "file:///srv/adapters/acme/../globex/v1/",  # traversal
        "file:///srv/adapters/acme/%2e%2e/globex/v1/",  # encoded traversal (the agent unquotes)
        "file:///etc/",
    ]
    for uri in ok:
        assert A.validate_adapter(adapter("a", weightsUri=uri).spec, [p]).ok, uri
    for uri in outside:
        v = A.validate_adapter(adapter("a", weightsUri=uri).spec, [p])
        assert (v.ok, v.reason, v.final) == (False, R.WEIGHTS_OUTSIDE_SOURCES, True), uri
        assert "acme/" in v.message


@pytest.mark.parametrize(
    "uri",
    [
        "s3://adapters/acme/support/v1/",  # where push puts it
        "s3://fleet-adapters/globex/secret/v1/",  # another tenant's folder
        "file:///etc/",  # the replica's own files
        "file:///var/run/secrets/kubernetes.io/serviceaccount/",
    ],
)
def test_a_pool_without_adapter_sources_takes_no_adapter_until_it_lists_one(uri):
    """Secure default: no location is trusted without the pool naming it (a tenant could
    otherwise point replicas at another tenant's files or probe the replica's own). Pending,
    not Rejected: listing a source clears it without touching the adapter."""
    bare = pool(adapterSources=[])
    v = A.validate_adapter(adapter("a", weightsUri=uri).spec, [bare])
    assert (v.ok, v.reason, v.final) == (False, R.NO_ADAPTER_SOURCES, False)
    assert "adapterSources" in v.message
    assert uri not in v.message  # nothing about the location is echoed
    s = _status(adapter("a", weightsUri=uri), v, owners=["pool-1"])
    assert s.phase == AdapterPhase.PENDING
    ready = find(s.conditions, R.READY)
    assert ready is not None
    assert ready.status == ConditionStatus.FALSE
    assert "adapterSources" in ready.message
    fixed = pool(adapterSources=["s3://adapters/"])
    assert A.validate_adapter(adapter("a", weightsUri=uri).spec, [fixed]).ok == (
        uri == "s3://adapters/acme/support/v1/"
    )
