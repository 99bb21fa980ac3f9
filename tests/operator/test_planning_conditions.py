from __future__ import annotations

from datetime import timedelta

from lorafleet_core.api.models import ConditionStatus
from lorafleet_core.planning.conditions import condition, find, set_condition, without
from tests.operator.factories import T0


def test_transition_time_moves_only_when_status_changes():
    first = set_condition([], condition("Ready", False, "Waiting", "a", T0))
    later = T0 + timedelta(minutes=5)
    same_status = set_condition(first, condition("Ready", False, "StillWaiting", "b", later))
    c = find(same_status, "Ready")
    assert c is not None
    assert c.last_transition_time == T0
    assert c.reason == "StillWaiting"
    flipped = set_condition(same_status, condition("Ready", True, "Done", "", later))
    c = find(flipped, "Ready")
    assert c is not None
    assert c.last_transition_time == later
    assert c.status == ConditionStatus.TRUE


def test_order_is_stable_by_type_and_without_removes():
    conds = set_condition([], condition("Ready", True, "R", "", T0))
    conds = set_condition(conds, condition("Conflict", False, "C", "", T0))
    assert [c.type for c in conds] == ["Conflict", "Ready"]
    assert [c.type for c in without(conds, "Conflict")] == ["Ready"]
