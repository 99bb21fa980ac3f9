"""autoMerge in standalone mode: the operator's merged-pool decisions, applied to the folder.

The reconciler plans with the operator's planners (planning.merge_advice,
planning.merged_lifecycle), so `lorafleet up` decides exactly as a cluster would, on the
same figures (the replicas' `/state`, shared and merged, every `LORAFLEET_UP_REPLAN_S`).
With the shared pool's `spec.autoMerge.enabled` this module applies what the plan asks:

- create: the merged ReplicaPool is written to the manifests folder (`replicapool-<name>.yaml`,
  the object the operator would create), merged as a local step and started as one local
  replica (standalone runs one per pool it creates; the manifest keeps the cluster's sizing);
  the replicas file and `merge-status.json` then list it, so the gateway routes the adapter
  to it once the replica reports the merged weights;
- scale: written to the manifest only (the replica count of a running `up` is fixed);
- drain: the annotation goes into the manifest; the gateway's folder catalog drops the pool
  at its next reload, the shared pool serves the adapter again;
- delete: the pool leaves the replicas file and the merge status, its processes stop, its
  manifest file is removed.

Only pools `up` created are touched by these (the same marks as on a cluster). Every merged
pool, a person's too, is merged again when its adapter changes content (`changed_merges`: the
same name with another checksum): its replicas stop first (the gateway forgets them), then the
new content is merged and the pool's replicas start on it, as at `up`. Creating one blocks the
reconcile loop while it merges and starts vLLM (a minute on a CPU); serving goes on meanwhile
(the gateway and the replicas are their own processes), and the shared pool serves the
adapter until the merged replica is ready.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorafleet_core.api import names
from lorafleet_core.planning.merged_lifecycle import PoolChange, merge_patch
from lorafleet_core.storage.manifests import load_file, load_folder, write_object
from lorafleet_standalone.cpu_binding import EngineCores
from lorafleet_standalone.local_replicas import start_merged_pools
from lorafleet_standalone.merged import MergedRun, changed_merges, plan_merged_pools
from lorafleet_standalone.planning import Plan
from lorafleet_standalone.supervisor import Supervisor


class AutoMerge:
    def __init__(
        self,
        *,
        state_dir: Path,
        manifests_dir: Path,
        sup: Supervisor,
        model_dir: Path,
        token: str,
        stop: Callable[[], bool],
        say: Callable[[str], None],
        runs: list[MergedRun],
        publish: Callable[[], None],
        cores: EngineCores,
    ) -> None:
        self.state_dir = state_dir
        self.manifests_dir = manifests_dir
        self.sup = sup
        self.model_dir = model_dir
        self.token = token
        self.stop = stop
        self.say = say
        self.runs = runs  # the runner's list: what the replicas file and up.json show
        self.publish = publish  # rewrite the replicas file and the merge status from runs
        self.cores = cores  # a pool created later takes the next engine share, round robin
        # Merged pools stopped because their adapter changed content, by replica count: each
        # starts again once its adapter can be merged.
        self.stopped: dict[str, int] = {}

    def apply(self, plan: Plan) -> None:
        for body in plan.pools_to_create:
            self._create(body)
        for change in plan.pool_changes:
            self._change(change)
        self.remerge_changed()

    def remerge_changed(self) -> None:
        """Stop each merged pool whose adapter changed content; merge and start again each
        stopped one whose adapter can be merged now (one deleted and not yet recreated waits)."""
        plans = plan_merged_pools(load_folder(self.manifests_dir))
        for changed in changed_merges(self.runs, plans):
            run = changed.run
            self.say(f"merged pool {run.pool}: stopping its replicas: {changed.why}")
            self.runs[:] = [r for r in self.runs if r is not run]
            self.publish()  # the gateway forgets its replicas and its merge first
            self.sup.stop(run.children)
            self.stopped[run.pool] = len(run.replicas)
        for p in plans:
            count = self.stopped.get(p.name)
            if count is None or p.record is None:
                continue
            del self.stopped[p.name]  # one try: a failed merge leaves the shared pool serving
            self.runs.extend(
                start_merged_pools(
                    self.state_dir,
                    self.sup,
                    [p],
                    self.model_dir,
                    self.token,
                    self.stop,
                    self.say,
                    self.cores,
                    count=count,
                )
            )
            self.publish()

    def _create(self, body: dict[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        if load_folder(self.manifests_dir).find(names.KIND_POOL, name) is not None:
            return
        path = write_object(self.manifests_dir, body)
        self.say(f"autoMerge: created ReplicaPool {name} ({path.name})")
        plans = [p for p in plan_merged_pools(load_folder(self.manifests_dir)) if p.name == name]
        started = start_merged_pools(
            self.state_dir,
            self.sup,
            plans,
            self.model_dir,
            self.token,
            self.stop,
            self.say,
            self.cores,
            count=1,
        )
        self.runs.extend(started)
        self.publish()

    def _change(self, change: PoolChange) -> None:
        obj = load_folder(self.manifests_dir).find(names.KIND_POOL, change.pool)
        self.say(f"autoMerge: {change.reason}: {change.message}")
        if change.delete:
            gone = [r for r in self.runs if r.pool == change.pool]
            self.runs[:] = [r for r in self.runs if r.pool != change.pool]
            self.publish()  # the gateway forgets its replicas first
            for run in gone:
                self.sup.stop(run.children)
            if obj is not None and len(load_file(obj.path).objects) == 1:
                obj.path.unlink()  # the file `up` wrote for it
            return
        if obj is None or change.patch is None:
            return
        write_object(self.manifests_dir, merge_patch(obj.body, change.patch))
