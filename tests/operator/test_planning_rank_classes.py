"""Rank classes: several shared pools of one base model, each adapter in the smallest that fits."""

from __future__ import annotations

from lorafleet_core.api import reasons as R
from lorafleet_core.api.models import AdapterPhase
from lorafleet_core.planning import adapters as A
from lorafleet_core.planning.fleet import FleetSnapshot, plan_fleet
from lorafleet_core.wire.records import decode_owned
from tests.operator.factories import T0, adapter, entry, pod_views, pool

# Names sort against the rank order on purpose: the choice must follow maxRank, not names.
R64 = pool("a-rank64", engine={"maxRank": 64})
R32 = pool("b-rank32", engine={"maxRank": 32})
R16 = pool("c-rank16", engine={"maxRank": 16})
CLASSES = [R64, R32, R16]


def test_rank_32_adapter_lands_in_the_rank_32_pool():
    v = A.validate_adapter(adapter("x", rank=32).spec, CLASSES)
    assert (v.ok, v.pool) == (True, "b-rank32")


def test_rank_8_adapter_lands_in_the_rank_16_pool():
    v = A.validate_adapter(adapter("y", rank=8).spec, CLASSES)
    assert (v.ok, v.pool) == (True, "c-rank16")


def test_rank_above_every_class_is_rejected_naming_the_largest_class():
    v = A.validate_adapter(adapter("z", rank=128).spec, CLASSES)
    assert (v.ok, v.reason, v.final) == (False, R.RANK_TOO_HIGH, True)
    assert "maxRank 64" in v.message


def test_equal_rank_classes_break_ties_by_name():
    twins = [pool("b-twin", engine={"maxRank": 16}), pool("a-twin", engine={"maxRank": 16})]
    assert A.validate_adapter(adapter("t", rank=8).spec, twins).pool == "a-twin"


def test_a_merged_pool_never_takes_placements():
    merged = pool("a-merged", engine={"maxRank": 16}, merged={"adapter": "hot"})
    v = A.validate_adapter(adapter("hot", rank=8).spec, [merged, R32])
    assert v.pool == "b-rank32"
    only_merged = A.validate_adapter(adapter("hot", rank=8).spec, [merged])
    assert (only_merged.ok, only_merged.reason, only_merged.final) == (
        False,
        R.NO_MATCHING_POOL,
        False,
    )


def test_fleet_plan_puts_each_adapter_on_its_rank_class_replicas():
    snap = FleetSnapshot(
        pools=CLASSES,
        adapters=[entry("big", rank=32), entry("small", rank=8)],
        aliases=[],
        pods=[*pod_views("b-rank32", 3), *pod_views("c-rank16", 3), *pod_views("a-rank64", 3)],
    )
    plan = plan_fleet(snap, T0)
    big, small = plan.adapter_status["big"], plan.adapter_status["small"]
    assert big.phase == small.phase == AdapterPhase.READY
    assert all(o.startswith("b-rank32-") for o in big.owners)
    assert all(o.startswith("c-rank16-") for o in small.owners)
    on_r64 = [decode_owned(v) for p, v in plan.pod_annotations.items() if p.startswith("a-")]
    assert on_r64
    assert all(records == [] for records in on_r64)
