"""Kubernetes conditions: set one, keep lastTransitionTime unless its status changes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from lorafleet_core.api.models import CONDITION_MESSAGE_MAX, Condition, ConditionStatus

_CUT = " ... (truncated)"


def condition(
    type_: str,
    status: bool | ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None = None,
) -> Condition:
    """A new condition; `status` may be a bool for the common True/False case.

    A message longer than the CRD allows is cut (saying so): messages list user-made names
    (the aliases blocking a deletion, the replicas refusing an adapter), and one tenant's 200
    long alias names must not fail the validation of the whole namespace's plan.
    """
    if isinstance(status, bool):
        status = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    if len(message) > CONDITION_MESSAGE_MAX:
        message = message[: CONDITION_MESSAGE_MAX - len(_CUT)] + _CUT
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=now,
        observed_generation=generation,
    )


def set_condition(existing: Sequence[Condition], new: Condition) -> list[Condition]:
    """`existing` with `new` replacing the condition of the same type.

    Kubernetes convention: lastTransitionTime records when *status* last changed, so a new
    reason or message with the same status keeps the old timestamp. Order is stable (by type)
    so the same inputs always serialise to the same bytes and no-op patches can be skipped.
    """
    out: dict[str, Condition] = {c.type: c for c in existing}
    old = out.get(new.type)
    if old is not None and old.status == new.status:
        new = new.model_copy(update={"last_transition_time": old.last_transition_time})
    out[new.type] = new
    return [out[k] for k in sorted(out)]


def merge_conditions(existing: Sequence[Condition], new: Iterable[Condition]) -> list[Condition]:
    """Apply `set_condition` for each of `new`."""
    result = list(existing)
    for c in new:
        result = set_condition(result, c)
    return result


def without(existing: Sequence[Condition], type_: str) -> list[Condition]:
    """`existing` minus the condition `type_` (e.g. Conflict once resolved)."""
    return [c for c in existing if c.type != type_]


def find(existing: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in existing if c.type == type_), None)
