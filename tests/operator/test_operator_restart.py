"""Operator restarts as a fault: `python -m lorafleet_operator` SIGKILLed in the middle of a
sync pass against kmock, restarted, and restarted once more when all is reconciled.

What must hold: the end state equals that of a clean run that was never killed,
and a restart writes nothing that is already right. Every write request the emulator serves
is logged per object, so "nothing" is counted, not assumed. The emulator delays each write a
little (a slow API server) so that the kill lands while a pass is still writing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lorafleet_core.api.names import ANNOTATION_OWNED_ADAPTERS
from lorafleet_core.kube.client import FIELD_MANAGER
from tests.conftest import free_port
from tests.operator.factories import adapter_body, alias_body, pool_body
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_fleet import pod_body
from tests.operator.state_servers import StateServer
from tests.scrape import Scrape

pytestmark = pytest.mark.timeout(240)

NS = "rst"
POOL = "rst"
N_PODS = 3
N_ADAPTERS = 60
ALIASES = {  # name -> (model, adapter)
    "bot-prod": ("acme/bot:prod", "ad-000"),
    "bot-canary": ("acme/bot:canary", "ad-001"),
    "big-prod": ("acme/big:prod", "too-big"),  # a refused deploy: Deployed False
    "ghost-prod": ("acme/ghost:prod", "no-such-adapter"),  # nothing to serve
    "foreign-prod": ("globex/bot:prod", "ad-002"),  # invalid: another tenant's model name
}
# Derived state (the operator's writes) and objects a pool owns; Events are not state.
STATE_PLURALS = (
    "loraadapters",
    "adapteraliases",
    "replicapools",
    "pods",
    "statefulsets",
    "services",
    "poddisruptionbudgets",
)
TIMES = re.compile(r"(?i)(time|at)$")  # lastTransitionTime, updatedAt, deployedAt, ...


class Operator:
    """One `python -m lorafleet_operator` process against `cluster`, metrics on a free port."""

    def __init__(self, cluster: Cluster, log_path: Path) -> None:
        self.metrics_port = free_port()
        env = os.environ | {
            "LORAFLEET_OPERATOR_API_SERVER": cluster.url,
            "LORAFLEET_OPERATOR_NAMESPACES": cluster.namespace,
            "LORAFLEET_OPERATOR_METRICS_PORT": str(self.metrics_port),
            # The first pass waits for every watch's initial list (kopf lists each kind on
            # its own), so it plans the whole namespace at once.
            "LORAFLEET_OPERATOR_SYNC_DEBOUNCE_SECONDS": "1.0",
            "LORAFLEET_OPERATOR_SYNC_MAX_DELAY_SECONDS": "2.0",
            "LORAFLEET_OPERATOR_POD_PATCH_INTERVAL_SECONDS": "0",
            "LORAFLEET_OPERATOR_WRITE_CONCURRENCY": "2",
            "LORAFLEET_OPERATOR_SCRAPE_TIMEOUT_SECONDS": "1",
        }
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lorafleet_operator"], env=env, stdout=log, stderr=log
            )

    def passes(self) -> float:
        """Sync passes finished in this process (0 until its metrics answer)."""
        try:
            scrape = Scrape.of(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout_s=2)
        except httpx.HTTPError:
            return 0.0
        return scrape.value("lorafleet_operator_sync_passes_total", namespace=NS)

    def alive(self) -> str | None:
        """For `eventually(abort=...)`: why waiting is pointless (the process exited)."""
        if self.proc.poll() is None:
            return None
        return f"operator exited {self.proc.returncode}: {self.log_path.read_text()[-3000:]}"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def replicas() -> Iterator[list[StateServer]]:
    servers = [StateServer(f"{POOL}-{i}") for i in range(N_PODS)]
    yield servers
    for s in servers:
        s.close()


def populate(cluster: Cluster, servers: list[StateServer]) -> None:
    """The same objects in every cluster: a pool, its pods, adapters (two refused), aliases
    (one refused, one with nothing to serve, one whose spec does not parse)."""
    body = pool_body(POOL, autoscaling={"enabled": False, "pollIntervalSeconds": 0.5})
    del body["metadata"]["namespace"]
    cluster.create(cluster.path("replicapools"), body)
    for s in servers:
        cluster.create(cluster.path("pods", group="v1"), pod_body(s.replica_id, POOL, s.port))
    adapters = [adapter_body(f"ad-{i:03d}", tenant="acme") for i in range(N_ADAPTERS)]
    adapters += [adapter_body("too-big", rank=64), adapter_body("bad-uri", weightsUri="ftp://x/")]
    for a in adapters:
        del a["metadata"]["namespace"]
        cluster.create(cluster.path("loraadapters"), a)
    for name, (model, target) in ALIASES.items():
        a = alias_body(name, model, target)
        del a["metadata"]["namespace"], a["metadata"]["creationTimestamp"]
        cluster.create(cluster.path("adapteraliases"), a)


def _timeless(value: Any) -> Any:
    """`value` without timestamps (they differ between two runs by construction)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if not TIMES.search(k)}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def end_state(cluster: Cluster) -> dict[str, Any]:
    """What the operator decides, per object: statuses, pods' owned adapters, owned specs."""
    out: dict[str, Any] = {}
    for plural in ("loraadapters", "adapteraliases", "replicapools"):
        for obj in cluster.items(cluster.path(plural)):
            out[f"{plural}/{obj['metadata']['name']}"] = _timeless(obj.get("status"))
    for obj in cluster.items(cluster.path("pods", group="v1")):
        annotations = obj["metadata"].get("annotations") or {}
        out[f"pods/{obj['metadata']['name']}"] = annotations.get(ANNOTATION_OWNED_ADAPTERS)
    for plural, group in (
        ("statefulsets", "apps/v1"),
        ("services", "v1"),
        ("poddisruptionbudgets", "policy/v1"),
    ):
        for obj in cluster.items(cluster.path(plural, group=group)):
            out[f"{plural}/{obj['metadata']['name']}"] = obj.get("spec")
    return out


def reconciled(cluster: Cluster) -> bool:
    """Every adapter and alias has its verdict, every pod its owned adapters, the pool its
    status and owned objects."""
    adapters = cluster.items(cluster.path("loraadapters"))
    if len(adapters) != N_ADAPTERS + 2 or not all(
        (a.get("status") or {}).get("phase") in {"Ready", "Rejected"} for a in adapters
    ):
        return False
    aliases = cluster.items(cluster.path("adapteraliases"))
    if not all((a.get("status") or {}).get("conditions") for a in aliases):
        return False
    pods = cluster.items(cluster.path("pods", group="v1"))
    if not all(ANNOTATION_OWNED_ADAPTERS in (p["metadata"].get("annotations") or {}) for p in pods):
        return False
    pool = cluster.get(cluster.path("replicapools", POOL)) or {}
    owned = cluster.get(cluster.path("poddisruptionbudgets", POOL, group="policy/v1"))
    return bool((pool.get("status") or {}).get("selector")) and owned is not None


def state_writes(cluster: Cluster) -> Counter[str]:
    """Write requests served per object (`plural/name`), Events left out."""
    return Counter(
        f"{plural}/{name}"
        for _method, plural, name in list(cluster.emulator.write_log)
        if plural in STATE_PLURALS and name
    )


def operator_patches(cluster: Cluster) -> Counter[str]:
    """The operator's own writes of derived state (its field manager), per object path with
    its subresource (`.../loraadapters/x/status`); kopf's bookkeeping (finalizer, the
    last-handled annotation) is not in here."""
    return Counter({path: len(bodies) for path, bodies in operator_writes(cluster).items()})


def operator_writes(cluster: Cluster, skip: Counter[str] | None = None) -> dict[str, list[Any]]:
    """The bodies of those writes per object path, in order; `skip` leaves out each path's
    first writes (those counted in an earlier `operator_patches`)."""
    out: dict[str, list[Any]] = {}
    log = list(zip(cluster.emulator.patch_log, cluster.emulator.patch_bodies, strict=False))
    for (path, _ctype, manager), body in log:
        if manager == FIELD_MANAGER:
            out.setdefault(path.split(f"/namespaces/{NS}/", 1)[-1], []).append(body)
    if skip:
        out = {k: v[skip.get(k, 0) :] for k, v in out.items() if v[skip.get(k, 0) :]}
    return out


def state_key(path: str) -> str:
    """The `end_state` key of a written path (`loraadapters/x/status` -> `loraadapters/x`)."""
    return path.removesuffix("/status")


def settle(cluster: Cluster, op: Operator) -> None:
    """Wait until reconciled and two more passes (the autoscaler's ticks keep them coming)
    have run with no state write: what is left is the steady state."""
    eventually(lambda: reconciled(cluster), within_s=90, what="reconciled", abort=op.alive)
    mark = (op.passes(), state_writes(cluster))

    def steady() -> bool:
        nonlocal mark
        now = (op.passes(), state_writes(cluster))
        if now[1] != mark[1]:
            mark = now  # still writing: start counting passes again
            return False
        return now[0] >= mark[0] + 2

    eventually(steady, within_s=60, interval_s=0.2, what="two passes with no write", abort=op.alive)


def reference_state(tmp_path: Path, replicas: list[StateServer]) -> dict[str, Any]:
    """The settled state of the same world in a fresh namespace, one operator, no interruption."""
    clean = Cluster(NS)
    try:
        populate(clean, replicas)
        op = Operator(clean, tmp_path / "clean.log")
        try:
            settle(clean, op)
        finally:
            op.stop()
        return end_state(clean)
    finally:
        clean.close()


def test_operator_sigkilled_mid_pass_restarts_to_a_clean_runs_state_without_rewrites(
    tmp_path: Path, replicas: list[StateServer]
):
    want = reference_state(tmp_path, replicas)  # a run that is never interrupted

    cluster = Cluster(NS)
    try:
        populate(cluster, replicas)
        cluster.emulator.write_delay_s = 0.05  # a pass of ~70 writes, 2 at a time: ~2 s
        first = Operator(cluster, tmp_path / "first.log")
        eventually(
            lambda: sum(1 for k in operator_patches(cluster) if k.startswith("loraadapters/")) >= 8,
            within_s=60,
            interval_s=0.01,
            what="the first pass writing adapter statuses",
            abort=first.alive,
        )
        first.kill()
        # What the cluster held when the killed run stopped, read before its write count:
        # a write still in flight then lands in neither or only in the count.
        at_kill = end_state(cluster)
        by_first = operator_patches(cluster)
        adapters_done = sum(1 for k in by_first if k.startswith("loraadapters/"))
        assert adapters_done < N_ADAPTERS + 2, "the kill came after the pass: nothing to resume"
        assert not reconciled(cluster)

        second = Operator(cluster, tmp_path / "second.log")
        try:
            settle(cluster, second)
        finally:
            second.stop()
        assert end_state(cluster) == want
        by_second = operator_writes(cluster, skip=by_first)
        # What the killed run had already got right is not written again (a status it wrote
        # half-way, such as a pool's before its StatefulSet existed, is finished) ...
        right = {k for k, v in at_kill.items() if k in want and v == want[k]}
        rewritten = sorted(k for k in by_second if state_key(k) in right)
        assert rewritten == [], rewritten
        # ... and no two writes of one object carry the same content (no duplicate writes).
        repeated = {
            k: len(bodies)
            for k, bodies in by_second.items()
            if len({json.dumps(_timeless(b), sort_keys=True) for b in bodies}) < len(bodies)
        }
        assert repeated == {}, repeated
        assert {k for k in by_second if k.startswith("loraadapters/")}, "nothing was resumed"

        # A restart of a reconciled namespace writes nothing at all.
        settled = state_writes(cluster)
        third = Operator(cluster, tmp_path / "third.log")
        try:
            eventually(lambda: third.passes() >= 3, within_s=60, what="passes", abort=third.alive)
        finally:
            third.stop()
        assert state_writes(cluster) - settled == Counter()
        assert end_state(cluster) == want
    finally:
        cluster.close()


def test_two_operators_at_once_converge_to_the_same_state_without_a_write_storm(
    tmp_path: Path, replicas: list[StateServer]
):
    """The chart runs one (values.schema.json caps operator.replicas at 1, Recreate
    upgrades), but a second one started by hand must not fight the first: both plan the same
    world, so they write the same statuses, and a settled namespace is written by neither."""
    want = reference_state(tmp_path, replicas)

    cluster = Cluster(NS)
    try:
        populate(cluster, replicas)
        first = Operator(cluster, tmp_path / "a.log")
        second = Operator(cluster, tmp_path / "b.log")
        try:
            settle(cluster, first)
            settled = state_writes(cluster)
            marks = (first.passes(), second.passes())
            eventually(
                lambda: first.passes() >= marks[0] + 2 and second.passes() >= marks[1] + 2,
                within_s=60,
                what="passes of both",
                abort=lambda: first.alive() or second.alive(),
            )
            assert state_writes(cluster) - settled == Counter()
        finally:
            first.stop()
            second.stop()
        assert end_state(cluster) == want
    finally:
        cluster.close()


def test_a_restart_whose_watches_list_at_different_times_writes_nothing(
    tmp_path: Path, replicas: list[StateServer]
):
    """kopf lists each kind on its own. A restarted operator that planned as soon as the
    first lists were in (adapters but no pods yet, or the reverse) would write that partial
    world: every pod's owned adapters emptied (pre-warm lost) or every adapter's owners
    dropped, then written back a pass later. Here one kind's initial list is held for longer
    than a pass waits (debounce 1 s, max delay 2 s) on a reconciled namespace: nothing may be
    written."""
    cluster = Cluster(NS)
    try:
        populate(cluster, replicas)
        first = Operator(cluster, tmp_path / "first.log")
        try:
            settle(cluster, first)
        finally:
            first.stop()
        settled_state, settled = end_state(cluster), state_writes(cluster)
        for plural in ("loraadapters", "pods"):  # either alone rewrote pods and aliases
            cluster.emulator.list_delay_s = {plural: 4.0}
            op = Operator(cluster, tmp_path / f"late-{plural}.log")
            try:
                eventually(
                    lambda op=op: op.passes() >= 3, within_s=60, what="passes", abort=op.alive
                )
            finally:
                op.stop()
            written = state_writes(cluster) - settled
            assert written == Counter(), (plural, written)
            assert end_state(cluster) == settled_state, plural
    finally:
        cluster.close()
