"""`lorafleet up`'s local replicas: ids and free ports, their `/state`, forgetting a removed
adapter, a merged pool's start.

Shared by the runner (what starts at `up`) and standalone.auto_merge (a merged pool created
while `up` runs).
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable
from pathlib import Path

import httpx

from lorafleet_core.api.models import ReplicaBounds
from lorafleet_core.wire.replica_client import (
    StateUnavailable,
    fetch_state_sync,
    post_forget_sync,
)
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_standalone import processes
from lorafleet_standalone.cpu_binding import EngineCores
from lorafleet_standalone.merged import (
    MergedPoolPlan,
    MergedRun,
    merge_locally,
    merged_folder,
)
from lorafleet_standalone.processes import ReplicaPlan
from lorafleet_standalone.supervisor import StartError, Supervisor


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((processes.LOOPBACK, 0))
        return int(s.getsockname()[1])


# A pool's replicas.desired is written for a cluster (26 GPUs); on one machine every replica is a
# vLLM server of ~3 GB, so a count taken from a manifest is capped. `--replicas N` is honoured.
MAX_LOCAL_REPLICAS = 8


def local_replica_count(
    bounds: ReplicaBounds, requested: int | None, say: Callable[[str], None], pool: str
) -> int:
    """Replicas to run for a pool: `--replicas`, else its desired or min (at least one),
    capped at MAX_LOCAL_REPLICAS when taken from the manifest."""
    if requested:
        return requested
    wanted = bounds.desired or max(bounds.min, 1)
    if wanted > MAX_LOCAL_REPLICAS:
        say(
            f"pool {pool} asks for {wanted} replicas; running {MAX_LOCAL_REPLICAS} on this "
            "machine (pass --replicas N to choose)"
        )
        return MAX_LOCAL_REPLICAS
    return wanted


def _quiet(_msg: str) -> None:
    """Says nothing: start_merged_pools tells the user about capped counts itself."""


def merged_engine_count(plans: list[MergedPoolPlan]) -> int:
    """How many engines start_merged_pools starts at `up` (before it merges anything)."""
    return sum(
        local_replica_count(p.pool.spec.replicas, None, _quiet, p.name)
        for p in plans
        if p.record is not None
    )


def plan_replicas(state_dir: Path, pool_name: str, count: int) -> list[ReplicaPlan]:
    """Replica ids as a StatefulSet names its pods; every port picked free on loopback."""
    return [
        ReplicaPlan(
            id=f"{pool_name}-{i}",
            vllm_port=free_port(),
            data_port=free_port(),
            internal_port=free_port(),
            home=state_dir / "replicas" / f"{pool_name}-{i}",
            vllm_api_key=secrets.token_urlsafe(32),  # only this replica's agent gets it
        )
        for i in range(count)
    ]


def replica_states(replicas: list[ReplicaPlan]) -> dict[str, ReplicaState]:
    """Each reachable replica's state (traffic per adapter feeds the owner count)."""
    out: dict[str, ReplicaState] = {}
    with httpx.Client(timeout=2.0) as client:
        for r in replicas:
            try:
                out[r.id] = fetch_state_sync(client, r.internal_url, r.id)
            except StateUnavailable:
                continue  # a replica that does not answer reports nothing this round
    return out


def forget_on_replicas(
    replicas: list[ReplicaPlan], adapters: set[str], token: str | None
) -> set[str]:
    """Tell every replica to forget each adapter (its manifest was removed); returns those every
    replica forgot. A replica busy with the adapter's requests (409 `adapter_busy`) or
    answering an error leaves it for the next call. One not answering at all counts as done: a
    local agent that is down holds no record when the supervisor starts it again."""
    done = set()
    with httpx.Client(timeout=5.0) as client:
        for adapter in sorted(adapters):
            ok = True
            for r in replicas:
                try:
                    resp = post_forget_sync(client, r.internal_url, r.id, adapter, token=token)
                except httpx.TransportError:
                    continue
                ok = ok and resp.status_code == 200
            if ok:
                done.add(adapter)
    return done


def start_merged_pools(
    state_dir: Path,
    sup: Supervisor,
    plans: list[MergedPoolPlan],
    model_dir: Path,
    token: str,
    stop: Callable[[], bool],
    say: Callable[[str], None],
    cores: EngineCores,
    count: int | None = None,
) -> list[MergedRun]:
    """Each merged pool: the merge as a local step, then its own replica(s) on the result
    (`count`, else the pool's replicas.desired or min, at least one, capped)."""
    logs = state_dir / "logs"
    runs = []
    for p in plans:
        if p.record is None:  # refused by plan_merge: the shared pool serves the adapter
            say(f"merged pool not started: {p.problem}")
            continue
        say(f"merging {p.record.id} into the base model for merged pool {p.name}")
        try:
            status = merge_locally(p, model_dir, state_dir)
        except Exception as exc:  # a failed merge leaves the shared pool serving the adapter
            say(f"merged pool {p.name}: merge failed: {exc}")
            continue
        assert status.checksum is not None
        folder = merged_folder(state_dir, status.checksum)
        say(f"merged pool {p.name}: {status.checksum} at {folder}")
        n = local_replica_count(p.pool.spec.replicas, count, say, p.name)
        replicas = plan_replicas(state_dir, p.name, n)
        run = MergedRun(p.name, status, replicas)
        try:
            _start_replicas(run, p, sup, folder, token, stop, say, logs, cores)
        except StartError as exc:
            sup.stop(run.children)
            if stop():
                raise
            say(f"merged pool {p.name} not started: {exc}")  # the shared pool serves it
            continue
        runs.append(run)
    return runs


def _start_replicas(
    run: MergedRun,
    p: MergedPoolPlan,
    sup: Supervisor,
    folder: Path,
    token: str,
    stop: Callable[[], bool],
    say: Callable[[str], None],
    logs: Path,
    cores: EngineCores,
) -> None:
    assert p.record is not None
    assert run.status.checksum is not None
    for r in run.replicas:
        r.cache_dir.mkdir(parents=True, exist_ok=True)
        cpu = processes.is_cpu_build()
        engine = sup.start(
            processes.vllm_process(
                r, folder, p.pool.spec, cpu=cpu, omp_cpus=cores.next(), log_dir=logs
            )
        )
        run.children.append(engine)
        sup.wait_ready(engine, stop=stop)
        agent = sup.start(
            processes.agent_process(
                r,
                p.pool.spec,
                folder,
                internal_token=token,
                merged_checksum=run.status.checksum,
                log_dir=logs,
            )
        )
        run.children.append(agent)
        sup.wait_ready(agent, stop=stop)
        say(f"{agent.spec.name} serves {p.record.id} merged on {r.data_url}")
