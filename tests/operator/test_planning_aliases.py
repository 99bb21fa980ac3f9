from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from lorafleet_core.api import reasons as R
from lorafleet_core.api.models import AdapterPhase, ConditionStatus
from lorafleet_core.planning import aliases as L
from lorafleet_core.planning.conditions import find
from tests.operator.factories import T0, alias

READY = L.AdapterView("acme", AdapterPhase.READY, verified=True)
ADAPTERS = {
    "v1": READY,
    "v2": READY,
    "v3-pending": L.AdapterView("acme", AdapterPhase.PENDING),
    "globex-x": L.AdapterView("globex", AdapterPhase.READY),
}


def plan(a, others=(), adapters=ADAPTERS, at=T0):
    return L.plan_alias(a, adapters, list(others), at)


def cond(status, t):
    c = find(status.conditions, t)
    assert c is not None
    return c


def test_first_deploy_serves_target_and_starts_history():
    p = plan(alias("prod", "acme/support:prod", "v1"))
    assert p.status.adapter == "v1"
    assert p.status.previous_adapter is None
    assert p.deployed == "v1"
    assert [h.adapter for h in p.status.history] == ["v1"]
    assert cond(p.status, R.DEPLOYED).status == ConditionStatus.TRUE
    assert cond(p.status, R.READY).status == ConditionStatus.TRUE
    assert cond(p.status, R.CONFLICT).status == ConditionStatus.FALSE


def test_deploy_then_rollback():
    a = alias("prod", "acme/support:prod", "v1")
    a.status = plan(a).status
    a.spec.adapter = "v2"
    p2 = plan(a, at=T0 + timedelta(minutes=1))
    assert (p2.status.adapter, p2.status.previous_adapter) == ("v2", "v1")
    a.status = p2.status
    a.spec.adapter = "v1"  # rollback = set spec.adapter back
    p3 = plan(a, at=T0 + timedelta(minutes=2))
    assert (p3.status.adapter, p3.status.previous_adapter) == ("v1", "v2")
    assert [h.adapter for h in p3.status.history] == ["v1", "v2", "v1"]
    assert p3.status.updated_at == T0 + timedelta(minutes=2)


def test_unready_missing_or_foreign_target_keeps_serving_previous():
    a = alias("prod", "acme/support:prod", "v1")
    a.status = plan(a).status
    for target, reason in [
        ("v3-pending", R.ADAPTER_NOT_READY),
        ("nope", R.ADAPTER_NOT_FOUND),
        ("globex-x", R.TENANT_MISMATCH),
    ]:
        a.spec.adapter = target
        p = plan(a)
        assert p.status.adapter == "v1"
        assert p.deployed is None
        deployed = cond(p.status, R.DEPLOYED)
        assert deployed.status == ConditionStatus.FALSE
        assert deployed.reason == reason
        assert "still serving v1" in deployed.message
        assert cond(p.status, R.READY).status == ConditionStatus.TRUE


def test_a_deploy_waits_for_a_replica_to_verify_the_target_and_never_stops_serving():
    a = alias("prod", "acme/support:prod", "v1")
    a.status = plan(a).status
    a.spec.adapter = "v2"
    unproven = {**ADAPTERS, "v2": L.AdapterView("acme", AdapterPhase.READY)}
    p = plan(a, adapters=unproven, at=T0 + timedelta(minutes=1))
    assert (p.status.adapter, p.deployed) == ("v1", None)
    deployed = cond(p.status, R.DEPLOYED)
    assert (deployed.status, deployed.reason) == (ConditionStatus.FALSE, R.AWAITING_REPLICAS)
    assert "LoRAAdapter v2 " in deployed.message
    assert "still serving v1" in deployed.message
    assert cond(p.status, R.READY).status == ConditionStatus.TRUE
    # Every owner refused the files: the target turns Failed, the deploy is refused, v1 serves.
    a.status = p.status
    refused = {**ADAPTERS, "v2": L.AdapterView("acme", AdapterPhase.FAILED)}
    p = plan(a, adapters=refused, at=T0 + timedelta(minutes=2))
    assert p.status.adapter == "v1"
    deployed = cond(p.status, R.DEPLOYED)
    assert (deployed.reason, "is Failed" in deployed.message) == (R.ADAPTER_NOT_READY, True)
    assert cond(p.status, R.READY).status == ConditionStatus.TRUE
    # A replica holds its verified files: the deploy goes through.
    a.status = p.status
    p = plan(a, at=T0 + timedelta(minutes=3))
    assert (p.status.adapter, p.status.previous_adapter, p.deployed) == ("v2", "v1", "v2")


def test_nothing_servable_to_keep_deploys_a_ready_target_at_once():
    unproven = {**ADAPTERS, "v2": L.AdapterView("acme", AdapterPhase.READY)}
    first = plan(alias("prod", "acme/support:prod", "v2"), adapters=unproven)
    assert first.status.adapter == "v2"  # a first deploy: nothing to keep serving
    a = alias("prod", "acme/support:prod", "v1")
    a.status = plan(a).status
    a.spec.adapter = "v2"
    broken = {**unproven, "v1": L.AdapterView("acme", AdapterPhase.FAILED)}
    assert plan(a, adapters=broken).status.adapter == "v2"  # what it served no longer serves


def test_alias_is_not_ready_when_its_served_adapter_vanished_or_stopped_being_ready():
    a = alias("prod", "acme/support:prod", "v1")
    a.status = plan(a).status
    gone = {k: v for k, v in ADAPTERS.items() if k != "v1"}
    ready = cond(plan(a, adapters=gone).status, R.READY)
    assert (ready.status, ready.reason) == (ConditionStatus.FALSE, R.ADAPTER_NOT_FOUND)
    assert "v1" in ready.message
    failed = {**ADAPTERS, "v1": L.AdapterView("acme", AdapterPhase.FAILED)}
    ready = cond(plan(a, adapters=failed).status, R.READY)
    assert (ready.status, ready.reason) == (ConditionStatus.FALSE, R.ADAPTER_NOT_READY)
    assert "Failed" in ready.message
    # Back to Ready: serving again, nothing else changed.
    again = plan(a, adapters=ADAPTERS).status
    assert cond(again, R.READY).status == ConditionStatus.TRUE
    assert again.adapter == "v1"


def test_nothing_served_when_first_target_is_not_ready():
    p = plan(alias("prod", "acme/support:prod", "v3-pending"))
    assert p.status.adapter is None
    assert cond(p.status, R.READY).reason == "NothingToServe"


def test_newer_alias_claiming_the_same_model_gets_conflict():
    old = alias("prod", "acme/support:prod", "v1", age_s=60)
    new = alias("prod2", "acme/support:prod", "v2")
    claims = [
        L.AliasClaim(x.metadata.name, x.spec.model, L.created_at(x.metadata)) for x in (old, new)
    ]
    p_old, p_new = plan(old, claims), plan(new, claims)
    assert p_old.conflict_with is None
    assert p_old.status.adapter == "v1"
    assert p_new.conflict_with == "prod"
    assert p_new.status.adapter is None
    c = cond(p_new.status, R.CONFLICT)
    assert c.status == ConditionStatus.TRUE
    assert c.reason == R.MODEL_CLAIMED
    assert cond(p_new.status, R.READY).status == ConditionStatus.FALSE


def test_history_is_short():
    a = alias("prod", "acme/support:prod", "v1")
    for i in range(15):
        a.spec.adapter = "v1" if i % 2 else "v2"
        a.status = plan(a, at=T0 + timedelta(seconds=i)).status
    assert a.status is not None
    assert len(a.status.history) == L.HISTORY_MAX


def test_alias_to_an_alias_is_refused_saying_what_to_point_at():
    a = alias("prod", "acme/support:prod", "v1")
    a.status = plan(a).status
    a.spec.adapter = "canary"  # another alias's name
    other = L.AliasClaim("canary", "acme/support:canary", None)
    p = plan(a, others=[other])
    deployed = cond(p.status, R.DEPLOYED)
    assert deployed.reason == R.ADAPTER_NOT_FOUND
    assert "canary is an AdapterAlias, not a LoRAAdapter" in deployed.message
    assert p.status.adapter == "v1"  # the previous version keeps serving


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d", "e", "f"]),  # alias name
            st.sampled_from(["acme/x:prod", "acme/y:prod"]),  # model claimed
            st.one_of(st.none(), st.integers(0, 3)),  # created: minutes after T0, or none
        ),
        max_size=8,
        unique_by=lambda t: t[0],
    )
)
def test_indexed_claims_pick_the_same_older_claim_as_a_scan_of_all(rows):
    """plan_fleet indexes the claims once per pass (AliasClaims; a scan of every alias for
    each alias took 20-29 s a pass for 10,000 aliases, benchmarks/operator_planning.py); the
    index must name the same winner the full scan does, for every alias."""
    claims = [
        L.AliasClaim(n, m, None if c is None else T0 + timedelta(minutes=c)) for n, m, c in rows
    ]
    index = L.AliasClaims(claims)
    for me in claims:
        mine = L.claim_key(me.created, me.name)
        rivals = sorted(
            (c for c in claims if c.model == me.model and c.name != me.name),
            key=lambda c: L.claim_key(c.created, c.name),
        )
        scanned = next((c for c in rivals if L.claim_key(c.created, c.name) < mine), None)
        assert index.older_than(me.model, me.name, mine) == scanned
