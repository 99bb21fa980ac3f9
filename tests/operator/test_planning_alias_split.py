"""The split in force: each version of spec.split passes the deploy gate on its own."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from lorafleet_core.api import reasons as R
from lorafleet_core.api.models import AdapterAliasSpec, AdapterPhase, ConditionStatus, SplitTarget
from lorafleet_core.planning import aliases as L
from lorafleet_core.planning.alias_deploy import plan_set
from lorafleet_core.planning.conditions import find
from lorafleet_core.planning.fleet import _alias_warnings, plan_fleet
from lorafleet_core.wire.replica_state import ReplicaState
from tests.operator.factories import T0, alias, entry, pool_body
from tests.operator.test_planning_alias_names import _adapter
from tests.operator.test_planning_fleet import snapshot

READY = L.AdapterView("acme", AdapterPhase.READY, verified=True)
UNVERIFIED = L.AdapterView("acme", AdapterPhase.READY)
ADAPTERS = {
    "v1": READY,
    "v2": READY,
    "v3": READY,
    "v2-unverified": UNVERIFIED,
    "v2-rejected": L.AdapterView("acme", AdapterPhase.REJECTED),
    "v2-failed": L.AdapterView("acme", AdapterPhase.FAILED, verified=True),
    "v2-pending": L.AdapterView("acme", AdapterPhase.PENDING),
    "globex-x": L.AdapterView("globex", AdapterPhase.READY, verified=True),
}


def split(*pairs):
    return [SplitTarget(adapter=a, weight=w) for a, w in pairs]


def serving(primary="v1", *pairs, adapters=ADAPTERS):
    """An alias already serving `primary`, with spec.split set to `pairs`."""
    a = alias("prod", "acme/support:prod", primary)
    a.status = L.plan_alias(a, adapters, [], T0).status
    a.spec.split = split(*pairs) or None
    return a


def plan(a, adapters=ADAPTERS, minutes=1):
    return L.plan_alias(a, adapters, [], T0 + timedelta(minutes=minutes))


def in_force(status):
    return [(s.adapter, s.weight) for s in status.split or ()]


def cond(status):
    c = find(status.conditions, R.SPLIT)
    assert c is not None
    return c


def test_a_verified_version_takes_its_share_and_shows_in_status():
    p = plan(serving("v1", ("v2", 5)))
    assert p.status.adapter == "v1"
    assert in_force(p.status) == [("v2", 5)]
    assert p.status.traffic == "v1=95,v2=5"
    c = cond(p.status)
    assert (c.status, c.reason) == (ConditionStatus.TRUE, R.SPLIT_IN_FORCE)
    assert c.message == "v1 95%, v2 5%"
    # The split is traffic, not a deploy: no deploy event, history and rollback target kept.
    assert p.deployed is None
    assert [h.adapter for h in p.status.history] == ["v1"]


def test_no_split_leaves_the_status_as_before():
    p = plan(serving("v1"))
    assert p.status.split is None
    assert p.status.traffic is None
    assert find(p.status.conditions, R.SPLIT) is None


def test_rejected_failed_foreign_or_missing_versions_never_take_traffic():
    for version, reason in [
        ("v2-rejected", R.ADAPTER_NOT_READY),
        ("v2-failed", R.ADAPTER_NOT_READY),
        ("v2-pending", R.ADAPTER_NOT_READY),
        ("globex-x", R.TENANT_MISMATCH),
        ("nope", R.ADAPTER_NOT_FOUND),
        ("v2-unverified", R.AWAITING_REPLICAS),
    ]:
        p = plan(serving("v1", (version, 50), ("v3", 10)))
        assert p.status.adapter == "v1"
        assert in_force(p.status) == [("v3", 10)], version  # the good one is not held back
        assert p.status.traffic == "v1=90,v3=10"
        c = cond(p.status)
        assert (c.status, c.reason) == (ConditionStatus.FALSE, reason), version
        assert version in c.message
        assert c.message.endswith("their 50% stays with v1")
        # Deployed and Ready speak of spec.adapter only: it serves.
        ready = find(p.status.conditions, R.READY)
        assert ready is not None
        assert ready.status == ConditionStatus.TRUE


def test_a_refused_version_is_an_event_a_waiting_one_is_not():
    for version, events in [
        ("v2-rejected", [R.ADAPTER_NOT_READY]),
        ("nope", [R.ADAPTER_NOT_FOUND]),
        ("v2-unverified", []),
        ("v2-pending", []),
    ]:
        a = serving("v1", (version, 5))
        p = plan(a)
        warned = [r for r, _ in _alias_warnings(a.status, p.status, False, p.split_refused)]
        assert warned == events, version


def test_a_version_waiting_for_replicas_joins_once_verified():
    a = serving("v1", ("v2", 5))
    p = plan(a, {**ADAPTERS, "v2": UNVERIFIED})
    assert p.status.split is None
    assert cond(p.status).reason == R.AWAITING_REPLICAS
    a.status = p.status
    p = plan(a, minutes=2)
    assert in_force(p.status) == [("v2", 5)]
    assert cond(p.status).status == ConditionStatus.TRUE


def test_once_in_force_a_weight_change_is_immediate_and_losing_the_files_keeps_it():
    a = serving("v1", ("v2", 5))
    a.status = plan(a).status
    a.spec.split = split(("v2", 50))
    # No replica holds v2's files any more (evicted): it stays, as status.adapter would.
    p = plan(a, {**ADAPTERS, "v2": UNVERIFIED}, minutes=2)
    assert in_force(p.status) == [("v2", 50)]
    assert p.status.traffic == "v1=50,v2=50"


def test_a_version_that_turns_failed_falls_out_at_once():
    a = serving("v1", ("v2", 50))
    a.status = plan(a).status
    p = plan(a, {**ADAPTERS, "v2": L.AdapterView("acme", AdapterPhase.FAILED)}, minutes=2)
    assert p.status.split is None
    assert p.status.traffic is None
    assert cond(p.status).status == ConditionStatus.FALSE


def test_rollback_is_one_edit_and_the_condition_says_so():
    a = serving("v1", ("v2", 50))
    a.status = plan(a).status
    a.spec.split = None  # roll back: remove the entry
    p = plan(a, minutes=2)
    assert p.status.split is None
    assert p.status.traffic is None
    c = cond(p.status)
    assert (c.status, c.reason, c.message) == (
        ConditionStatus.TRUE,
        R.NO_SPLIT,
        "no split: v1 takes all",
    )


def test_promotion_to_100_moves_the_primary_at_once():
    """50/50 -> 100: spec.adapter v2 and no split; v2 was verified serving its half."""
    a = serving("v1", ("v2", 50))
    a.status = plan(a).status
    a.spec.adapter, a.spec.split = "v2", None
    p = plan(a, minutes=2)
    assert (p.status.adapter, p.status.previous_adapter) == ("v2", "v1")
    assert p.deployed == "v2"
    assert p.status.split is None


def test_while_a_primary_deploy_waits_the_old_primary_is_not_counted_twice():
    """spec.adapter v2 (awaiting replicas) with split [v1 50]: v1 still serves it all."""
    a = serving("v1")
    a.spec.adapter = "v2-unverified"
    a.spec.split = split(("v1", 50))
    p = plan(a)
    assert p.status.adapter == "v1"
    assert p.status.split is None
    assert p.status.traffic is None


def test_nothing_served_means_no_split_yet():
    a = alias("prod", "acme/support:prod", "v2-pending")
    a.spec.split = split(("v3", 5))
    p = plan(a)
    assert p.status.adapter is None
    assert p.status.split is None
    assert cond(p.status).status == ConditionStatus.FALSE


def test_alias_set_to_a_version_of_the_split_promotes_it_and_keeps_the_others():
    """`lorafleet alias set` / PUT /internal/aliases to v2 while v2 has a share: the entry goes
    (the spec would be refused with it), v3 keeps its share."""
    existing = alias("prod", "acme/support:prod", "acme-v1").wire()
    existing["spec"]["split"] = [
        {"adapter": "acme-v2", "weight": 50},
        {"adapter": "acme-v3", "weight": 5},
    ]
    body, previous = plan_set(
        "acme/support:prod",
        "acme-v2",
        found=_adapter("acme-v2", "acme"),
        pools=[pool_body("pool", engine={"maxRank": 16})],
        existing=existing,
        occupant=existing,
        where="folder x",
    )
    assert previous == "acme-v1"
    assert body["spec"]["adapter"] == "acme-v2"
    assert body["spec"]["split"] == [{"adapter": "acme-v3", "weight": 5}]
    AdapterAliasSpec.model_validate(body["spec"], strict=False)  # valid as written
    existing["spec"]["split"] = [{"adapter": "acme-v2", "weight": 50}]
    body, _ = plan_set(
        "acme/support:prod",
        "acme-v2",
        found=_adapter("acme-v2", "acme"),
        pools=[pool_body("pool", engine={"maxRank": 16})],
        existing=existing,
        occupant=existing,
        where="folder x",
    )
    assert "split" not in body["spec"]


def test_plan_fleet_lets_a_split_version_in_once_a_replica_verified_it_and_holds_its_deletion():
    """Through the whole planner (operator and `lorafleet up` alike): v2 takes its 5% once a
    replica reports its files verified; a version of a split cannot be deleted under it."""
    a = alias("prod", "acme/s:prod", "a1")
    a.spec.split = split(("a2", 5))
    adapters = [entry("a1"), entry("a2")]
    first = plan_fleet(snapshot(adapters, [a]), T0)
    assert first.alias_status["prod"].adapter == "a1"  # nothing to keep: no wait for files
    assert first.alias_status["prod"].split is None
    assert cond(first.alias_status["prod"]).reason == R.AWAITING_REPLICAS
    verified = {"pool-0": ReplicaState(replica_id="pool-0", disk_adapters=["a1", "a2"])}
    a.status = first.alias_status["prod"]
    second = plan_fleet(snapshot(adapters, [a], states=verified), T0 + timedelta(seconds=5))
    assert second.alias_status["prod"].traffic == "a1=95,a2=5"
    a.status = second.alias_status["prod"]
    going = [entry("a1"), dataclasses.replace(entry("a2"), deleting=True)]
    third = plan_fleet(snapshot(going, [a], states=verified), T0 + timedelta(seconds=9))
    assert third.blocked_deletions == {"a2": ["prod"]}
