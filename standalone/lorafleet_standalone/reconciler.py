"""Standalone reconciler: the operator's job over a folder of manifests instead of a cluster.

When a manifest file changes (polled by name, size and mtime), and every `replan_s` with the
replicas' reported state (so hot adapters gain owners, as on a cluster), it plans with the
operator's planners (see planning) and applies the plan locally:

- each replica's owned adapters go into the downward-API-format file its agent watches (what
  the operator writes as a pod annotation on a cluster);
- each adapter's phase (Failed: every owner refused its files) goes to `<folder>/.lorafleet/`
  too, where `lorafleet alias set` and the control API read it to refuse such a target;
- alias status (adapter, previousAdapter, history, conditions) goes to `<folder>/.lorafleet/`
  (lorafleet_core.storage.standalone_state): this reconciler is its one writer, as the operator is
  on
  a cluster, so a deploy to an adapter that is not Ready keeps the old one serving in both;
- a bad manifest is reported once on the console, and in the status file while it lasts, with
  a clear message; everything else keeps serving;
- a LoRAAdapter whose manifest was removed is kept in `removed` until the runner has told
  every local agent to forget it (`forgotten`), so an adapter added again under the name with
  other weights is a new adapter to them, not a conflicting record;
- the adapters' traffic figures and merged-pool recommendation carry over to the next pass
  (a cluster keeps them in status), so autoMerge decides as the operator does; what the plan
  asks of merged pools is applied by standalone.auto_merge.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from lorafleet_core.api import names, reasons
from lorafleet_core.api.models import AdapterAliasStatus
from lorafleet_core.planning.fleet import FleetParams
from lorafleet_core.storage.manifests import atomic_write, fingerprint, load_folder
from lorafleet_core.storage.standalone_state import (
    AdapterVerdict,
    adapter_status_path,
    alias_status_path,
    load_alias_statuses,
    save_adapter_verdicts,
    save_alias_statuses,
)
from lorafleet_core.wire.records import format_downward_annotations
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_standalone.planning import Plan, Problem, plan, status_document


class Reconciler:
    def __init__(
        self,
        manifests_dir: Path,
        annotation_files: dict[str, Path],
        status_file: Path,
        *,
        pool_name: str | None = None,
        say: Callable[[str], None] = print,
        replan_s: float = 10.0,
        params: FleetParams | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.manifests_dir = manifests_dir
        self.clock = clock  # the planners' `now` (deploys' progress deadlines count on it)
        self.annotation_files = annotation_files  # replica id -> file its agent watches
        self.status_file = status_file
        self.pool_name = pool_name
        self.say = say
        self.replan_s = replan_s
        self.params = params
        self._seen: tuple[tuple[str, int, int], ...] | None = None
        self._planned_at = 0.0
        self._reported: set[Problem] = set()
        self._served: dict[str, str] = {}
        # The replicas' last reported states: a pass for a folder change between two polls
        # plans with them, as the operator plans with its last scrape. Planning without them
        # would drop the replicas' verdicts (an adapter every owner refused would turn Ready
        # again until the next poll, and a deploy waiting on it would go through).
        self.states: dict[str, ReplicaState] = {}
        self._verdicts: dict[str, AdapterVerdict] | None = None  # as last saved
        # LoRAAdapters whose manifest went while a plan held them, not yet forgotten by every
        # local agent (the runner tells them and calls `forgotten`).
        self.removed: set[str] = set()
        self.last: Plan | None = None

    def tick(self, states: Mapping[str, ReplicaState] | None = None) -> Plan | None:
        """Reconcile when the folder changed or a re-plan is due; returns the new plan.

        `states`: the replicas' states polled just now (None: not polled this time; the last
        ones stand)."""
        now = fingerprint(self.manifests_dir)
        due = states is not None and (
            self.awaiting_replicas or time.monotonic() - self._planned_at >= self.replan_s
        )
        if now == self._seen and not due:
            return None
        self._seen = now
        return self.reconcile(states)

    @property
    def awaiting_replicas(self) -> bool:
        """Some deploy waits for a replica to verify its target (also past its progress
        deadline: it still completes then): the caller polls the replicas at its own pace (not
        every `replan_s`) and each poll re-plans, so the deploy completes as soon as a replica
        holds the files, and is reported stalled within a poll of its deadline."""
        if self.last is None:
            return False
        return any(
            (
                c.type == reasons.DEPLOYED
                and c.reason in (reasons.AWAITING_REPLICAS, reasons.PROGRESS_DEADLINE_EXCEEDED)
            )
            # A version of spec.split waits the same way (Split names the first waiting one).
            or (c.type == reasons.SPLIT and c.reason == reasons.AWAITING_REPLICAS)
            for st in self.last.alias_statuses.values()
            for c in st.conditions
        )

    def reconcile(self, states: Mapping[str, ReplicaState] | None = None) -> Plan:
        self._planned_at = time.monotonic()
        if states is not None:
            self.states = dict(states)
        manifests = load_folder(self.manifests_dir)
        stored, rewrite = self._stored_alias_statuses()
        result = plan(
            manifests,
            sorted(self.annotation_files),
            self.clock(),
            pool_name=self.pool_name,
            alias_statuses=stored,
            states=self.states,
            adapter_statuses=self.last.adapter_statuses if self.last else None,
            params=self.params,
            held_specs=self.last.adapter_specs if self.last is not None else None,
            listed=self.last.annotations if self.last is not None else None,
        )
        held = set(self.last.adapter_specs) if self.last is not None else set()
        # A name back in the folder before it was forgotten is no longer deleted.
        self.removed = (self.removed | held) - set(result.adapter_specs)
        for replica, path in self.annotation_files.items():
            value = result.annotations.get(replica, "[]")
            text = format_downward_annotations({names.ANNOTATION_OWNED_ADAPTERS: value})
            if not path.is_file() or path.read_text() != text:
                atomic_write(path, text)
        if rewrite or any(stored.get(k) != v for k, v in result.alias_statuses.items()):
            # Statuses of aliases whose file is gone are kept: the rollback target survives
            # a delete-and-recreate of the file.
            save_alias_statuses(self.manifests_dir, {**stored, **result.alias_statuses})
        verdicts = {
            name: AdapterVerdict(phase=st.phase, checksum=str(spec.get("checksum")))
            for name, st in result.adapter_statuses.items()
            if isinstance(spec := result.adapter_specs.get(name), dict)
        }
        if verdicts != self._verdicts or not adapter_status_path(self.manifests_dir).is_file():
            save_adapter_verdicts(self.manifests_dir, verdicts)
            self._verdicts = verdicts
        doc = status_document(result, time.time())
        atomic_write(self.status_file, json.dumps(doc, indent=2) + "\n")
        self._report(result)
        self.last = result
        return result

    def forgotten(self, adapters: set[str]) -> None:
        """Every local agent has forgotten these removed adapters."""
        self.removed -= adapters

    def _stored_alias_statuses(self) -> tuple[dict[str, AdapterAliasStatus], bool]:
        """The alias statuses kept beside the manifests, and whether the file must be rewritten
        (it was corrupt and is moved aside).

        This reconciler is the file's one writer, so an unreadable one (a disk full mid-write
        by something else, a hand edit) cannot be fixed by waiting: it is kept for a human as
        `alias-status.json.corrupt-<time>` and the statuses start again from this run's last
        plan (or, at start-up, from nothing: every alias then deploys its spec.adapter through
        the same Ready check as any deploy). Reported once, not on every tick.
        """
        try:
            return load_alias_statuses(self.manifests_dir), False
        except ValueError as exc:
            path = alias_status_path(self.manifests_dir)
            aside = path.with_name(f"{path.name}.corrupt-{time.time_ns()}")
            path.replace(aside)
            kept = dict(self.last.alias_statuses) if self.last is not None else {}
            self.say(
                f"alias status file unreadable ({exc}); kept as {aside.name}, "
                f"restarting from {'the last plan' if kept else 'the manifests'}"
            )
            return kept, True

    def _report(self, result: Plan) -> None:
        current = set(result.problems)
        for problem in sorted(current - self._reported):
            self.say(f"manifest problem: {problem}")
        for problem in sorted(self._reported - current):
            self.say(f"resolved: {problem.file}: {problem.kind}/{problem.name}")
        self._reported = current
        for adapter, (reason, message) in sorted(result.merge_events.items()):
            self.say(f"MergedPoolRecommended {adapter}: {reason}: {message}")
        served = {m: result.traffic.get(m, a) for m, a in result.models.items()}
        if served and served != self._served:
            self._served = served
            summary = ", ".join(f"{m} -> {a}" for m, a in served.items())
            self.say(f"serving {summary}")
