"""The progress deadline of an alias deploy, planned with an explicit `now` (no I/O)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from pydantic import ValidationError

from lorafleet_core.api import reasons as R
from lorafleet_core.api.models import AdapterAlias, AdapterPhase, ConditionStatus
from lorafleet_core.planning import aliases as L
from lorafleet_core.planning.conditions import find
from lorafleet_core.planning.fleet import FleetSnapshot, plan_fleet
from lorafleet_core.wire.replica_state import ReplicaState
from tests.operator.factories import T0, alias, alias_body, entry, pod_views, pool

VERIFIED = L.AdapterView("acme", AdapterPhase.READY, verified=True)
UNVERIFIED = L.AdapterView("acme", AdapterPhase.READY)
PENDING = L.AdapterView("acme", AdapterPhase.PENDING)
START = T0 + timedelta(minutes=1)  # when spec.adapter first names v2


def deployed(status):
    c = find(status.conditions, R.DEPLOYED)
    assert c is not None
    return c


def serving_v1_deploying(target: str, deadline_s: int | None = None) -> AdapterAlias:
    """An alias serving v1 whose spec.adapter was just set to `target` (seen first at START)."""
    a = alias("prod", "acme/support:prod", "v1")
    if deadline_s is not None:
        a.spec.progress_deadline_seconds = deadline_s
    a.status = L.plan_alias(a, {"v1": VERIFIED}, [], T0).status
    a.spec.adapter = target
    return a


def test_an_unverified_deploy_is_reported_stalled_at_its_deadline_and_completes_later():
    """Before the deadline the deploy waits (AwaitingReplicas) and the plan says when the
    deadline falls; from the deadline on, Deployed says ProgressDeadlineExceeded with what it
    waits for and since when, v1 keeps serving; once a replica verifies v2 it is deployed."""
    views = {"v1": VERIFIED, "v2": UNVERIFIED}
    a = serving_v1_deploying("v2")
    p = L.plan_alias(a, views, [], START)
    assert p.status.deploying is not None
    assert (p.status.deploying.adapter, p.status.deploying.started_at) == ("v2", START)
    assert p.deadline == START + timedelta(seconds=600)
    assert deployed(p.status).reason == R.AWAITING_REPLICAS

    a.status = p.status
    almost = L.plan_alias(a, views, [], START + timedelta(seconds=599))
    assert deployed(almost.status).reason == R.AWAITING_REPLICAS
    assert almost.status.deploying == p.status.deploying  # the clock is not restarted

    a.status = almost.status
    late = L.plan_alias(a, views, [], START + timedelta(seconds=600))
    stalled = deployed(late.status)
    assert (stalled.status, stalled.reason) == (ConditionStatus.FALSE, R.PROGRESS_DEADLINE_EXCEEDED)
    assert stalled.message.startswith("LoRAAdapter v2 is Ready but no replica has verified")
    assert "after 600 s (spec.progressDeadlineSeconds" in stalled.message
    assert "began 2026-11-29T12:01:00Z" in stalled.message
    assert stalled.message.endswith("still serving v1")
    assert late.deadline is None  # nothing more to wake for
    assert (late.status.adapter, late.deployed) == ("v1", None)
    ready = find(late.status.conditions, R.READY)
    assert ready is not None
    assert ready.status == ConditionStatus.TRUE

    a.status = late.status
    done = L.plan_alias(a, {"v1": VERIFIED, "v2": VERIFIED}, [], START + timedelta(hours=2))
    assert (done.status.adapter, done.status.previous_adapter, done.deployed) == ("v2", "v1", "v2")
    assert done.status.deploying is None
    assert deployed(done.status).status == ConditionStatus.TRUE


def test_a_new_target_restarts_the_clock_and_a_shorter_deadline_is_honoured():
    views = {"v1": VERIFIED, "v2": UNVERIFIED, "v3": UNVERIFIED}
    a = serving_v1_deploying("v2", deadline_s=30)
    a.status = L.plan_alias(a, views, [], START).status
    a.spec.adapter = "v3"
    later = START + timedelta(seconds=20)
    p = L.plan_alias(a, views, [], later)
    assert p.status.deploying is not None
    assert (p.status.deploying.adapter, p.status.deploying.started_at) == ("v3", later)
    assert p.deadline == later + timedelta(seconds=30)
    a.status = p.status
    # 31 s after v2 was named, but only 11 s after v3: still waiting.
    p = L.plan_alias(a, views, [], START + timedelta(seconds=31))
    assert deployed(p.status).reason == R.AWAITING_REPLICAS
    p = L.plan_alias(a, views, [], later + timedelta(seconds=30))
    assert deployed(p.status).reason == R.PROGRESS_DEADLINE_EXCEEDED
    assert "after 30 s" in deployed(p.status).message


def test_a_target_stuck_pending_counts_too_even_for_a_first_deploy():
    first = alias("prod", "acme/support:prod", "v2")
    first.spec.progress_deadline_seconds = 60
    first.status = L.plan_alias(first, {"v2": PENDING}, [], START).status
    p = L.plan_alias(first, {"v2": PENDING}, [], START + timedelta(seconds=60))
    stalled = deployed(p.status)
    assert stalled.reason == R.PROGRESS_DEADLINE_EXCEEDED
    assert stalled.message.startswith("LoRAAdapter v2 is Pending, not Ready after 60 s")
    assert stalled.message.endswith("nothing served yet")
    assert p.status.adapter is None


@pytest.mark.parametrize(
    ("view", "reason"),
    [
        (None, R.ADAPTER_NOT_FOUND),
        (L.AdapterView("acme", AdapterPhase.FAILED), R.ADAPTER_NOT_READY),
        (L.AdapterView("globex", AdapterPhase.READY), R.TENANT_MISMATCH),
    ],
)
def test_a_refused_deploy_keeps_its_own_reason_past_the_deadline(view, reason):
    """A refusal already says what is wrong (and had its Warning Event); the deadline only
    speaks for a deploy that still waits."""
    views = {"v1": VERIFIED, **({"v2": view} if view else {})}
    a = serving_v1_deploying("v2")
    a.status = L.plan_alias(a, views, [], START).status
    p = L.plan_alias(a, views, [], START + timedelta(hours=1))
    assert deployed(p.status).reason == reason
    assert p.deadline is None
    assert p.status.adapter == "v1"


def test_the_fleet_plan_wakes_at_the_earliest_deadline_and_warns_once():
    """plan_fleet carries the earliest deadline of its waiting deploys (the caller plans
    again then) and one Warning Event when a deploy turns stalled, not one per pass."""
    adapters = [entry("v1"), entry("v2"), entry("v3")]
    slow = alias("slow", "acme/slow:prod", "v1")
    quick = alias("quick", "acme/quick:prod", "v1")
    quick.spec.progress_deadline_seconds = 30
    verified = {"pool-0": ReplicaState(replica_id="pool-0", disk_adapters=["v1"])}
    snap = FleetSnapshot(
        pools=[pool()],
        adapters=adapters,
        aliases=[slow, quick],
        pods=pod_views("pool", 2),
        states=verified,
    )

    def settle(snap, plan):
        adapters = [
            dataclasses.replace(e, status=plan.adapter_status[e.name]) for e in snap.adapters
        ]
        aliases = [
            a.model_copy(update={"status": plan.alias_status[a.metadata.name]})
            for a in snap.aliases
        ]
        return dataclasses.replace(snap, adapters=adapters, aliases=aliases)

    first = plan_fleet(snap, T0)
    assert first.wake_at is None  # both serve v1 at once: nothing waits
    snap = settle(snap, first)
    for a in snap.aliases:
        a.spec.adapter = "v2" if a.metadata.name == "slow" else "v3"
    waiting = plan_fleet(snap, START)
    assert waiting.wake_at == START + timedelta(seconds=30)
    assert waiting.warnings == []
    snap = settle(snap, waiting)
    stalled = plan_fleet(snap, START + timedelta(seconds=30))
    assert [(w[1], w[2]) for w in stalled.warnings] == [("quick", R.PROGRESS_DEADLINE_EXCEEDED)]
    assert stalled.wake_at == START + timedelta(seconds=600)  # the slow one is still to come
    snap = settle(snap, stalled)
    assert plan_fleet(snap, START + timedelta(seconds=31)).warnings == []


def test_progress_deadline_seconds_defaults_to_600_and_is_strict():
    body = alias_body("prod", "acme/support:prod", "v1")
    assert AdapterAlias.model_validate(body).spec.progress_deadline_seconds == 600
    for bad in (0, -1, "600", 2**31):
        with pytest.raises(ValidationError, match=r"progressDeadlineSeconds|progress_deadline"):
            AdapterAlias.model_validate(
                {**body, "spec": {**body["spec"], "progressDeadlineSeconds": bad}}
            )
