"""The weighted versions of an alias in force: `spec.split` through the deploy gate.

A version of `spec.split` takes its share of requests only once it passes the gate
`spec.adapter` passes (planning.aliases): it exists, is the alias's tenant's, is not being
deleted, is Ready, and some replica has verified its files. Until then its share stays with
the version serving `status.adapter`, and the `Split` condition says why. Once in force it
stays while it is servable (as `status.adapter` does), so losing its files from every disk
tier does not take it out; Rejected, Failed or deleted versions fall out at once, their share
back to the primary. Weights of a version already in force change at once: a weight is
traffic, not a deploy. Rollback is an edit: remove the entry and its share goes back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from lorafleet_core.api.models import AdapterAliasSpec, AdapterPhase, SplitTarget
from lorafleet_core.api.reasons import (
    ADAPTER_DELETING,
    ADAPTER_NOT_FOUND,
    ADAPTER_NOT_READY,
    AWAITING_REPLICAS,
    NO_SPLIT,
    SPLIT_IN_FORCE,
    TENANT_MISMATCH,
)


@dataclass(frozen=True)
class AdapterView:
    """What an alias needs to know about a LoRAAdapter (planning.aliases imports it from here,
    the gate of every version an alias may serve)."""

    tenant: str
    phase: AdapterPhase | None
    deleting: bool = False
    # Some replica reports the adapter's files verified (in its gpu, ram or disk tier).
    verified: bool = False


@dataclass(frozen=True)
class SplitPlan:
    """`in_force`: the split to write in status.split (None: none). `reason`/`message`: the
    Split condition, `ok` its status; None when the alias has no split and never had one.
    `refused`: a version is kept out for good (not merely waiting), worth an Event."""

    in_force: list[SplitTarget] | None
    ok: bool = True
    reason: str | None = None
    message: str = ""
    refused: bool = False
    kept_out: list[str] = field(default_factory=list)


def plan_split(
    spec: AdapterAliasSpec,
    serving: str | None,
    old_in_force: Collection[str],
    adapters: Mapping[str, AdapterView],
    alias_names: Collection[str] = (),
    *,
    had_split: bool = False,
) -> SplitPlan:
    """The split in force for `spec` while `serving` (status.adapter) is the primary.

    `old_in_force`: the versions of the previous status.split (they stay without a fresh
    verification); `alias_names`: the namespace's aliases, for a clearer message when an entry
    names one; `had_split`: the old status carries a Split condition (so "no split" is said
    once the split is removed, rather than the condition going stale)."""
    wanted = spec.split or []
    if not wanted:
        if not (had_split or old_in_force):
            return SplitPlan(in_force=None, reason=None)
        who = serving or "nothing"
        return SplitPlan(in_force=None, reason=NO_SPLIT, message=f"no split: {who} takes all")
    if not serving:
        return SplitPlan(
            in_force=None,
            ok=False,
            reason=ADAPTER_NOT_READY,
            message="the split waits for a primary version: nothing serves spec.adapter yet",
            kept_out=[s.adapter for s in wanted],
        )
    in_force: list[SplitTarget] = []
    problems: list[tuple[str, str]] = []
    kept_out: list[str] = []
    refused = False
    for entry in wanted:
        if entry.adapter == serving:
            # spec.adapter moved on while the old primary still serves: it takes it all anyway.
            continue
        problem = _gate(entry.adapter, spec.tenant, adapters, alias_names, old_in_force)
        if problem is None:
            in_force.append(entry.model_copy())
            continue
        kept_out.append(entry.adapter)
        problems.append(problem)
        refused = refused or (problem[0] != AWAITING_REPLICAS and not _pending(entry, adapters))
    if not problems:
        shares = ", ".join(f"{s.adapter} {s.weight}%" for s in in_force)
        rest = 100 - sum(s.weight for s in in_force)
        return SplitPlan(
            in_force=in_force or None,
            reason=SPLIT_IN_FORCE,
            message=f"{serving} {rest}%" + (f", {shares}" if shares else ""),
        )
    held = sum(s.weight for s in wanted if s.adapter in kept_out)
    message = "; ".join(m for _, m in problems) + f"; their {held}% stays with {serving}"
    return SplitPlan(
        in_force=in_force or None,
        ok=False,
        reason=problems[0][0],
        message=message,
        refused=refused,
        kept_out=kept_out,
    )


def _pending(entry: SplitTarget, adapters: Mapping[str, AdapterView]) -> bool:
    view = adapters.get(entry.adapter)
    return view is not None and view.phase in (None, AdapterPhase.PENDING)


def _gate(
    name: str,
    tenant: str,
    adapters: Mapping[str, AdapterView],
    alias_names: Collection[str],
    old_in_force: Collection[str],
) -> tuple[str, str] | None:
    """(reason, message) keeping version `name` out of the split, or None: it takes its share."""
    view = adapters.get(name)
    if view is None and name in alias_names:
        return (
            ADAPTER_NOT_FOUND,
            f"split: {name} is an AdapterAlias, not a LoRAAdapter: name an adapter version",
        )
    if view is None:
        return ADAPTER_NOT_FOUND, f"split: LoRAAdapter {name} does not exist"
    if view.tenant != tenant:
        return (
            TENANT_MISMATCH,
            f"split: LoRAAdapter {name} belongs to tenant {view.tenant}, not {tenant}",
        )
    if view.deleting:
        return ADAPTER_DELETING, f"split: LoRAAdapter {name} is being deleted"
    if view.phase != AdapterPhase.READY:
        return (
            ADAPTER_NOT_READY,
            f"split: LoRAAdapter {name} is {view.phase or 'Pending'}, not Ready",
        )
    if not view.verified and name not in old_in_force:
        return (
            AWAITING_REPLICAS,
            f"split: LoRAAdapter {name} is Ready but no replica has verified its files yet",
        )
    return None
