"""`lorafleet up`: start replicas and the gateway, keep manifests reconciled, stop cleanly.

Order: first reconcile (so every agent finds its owned-adapters file at start) -> all vLLM
servers (started together, they take the longest) -> one agent per replica -> the gateway.
Then, every second: reconcile if a manifest changed, restart or report exited children, and
refresh `<state>/up.json` (what `lorafleet status` reads). SIGINT/SIGTERM stop everything,
newest first, whole process groups (see supervisor).
"""

from __future__ import annotations

import secrets
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO

from lorafleet_core.api.models import ReplicaPoolSpec
from lorafleet_core.planning.fleet import FleetParams
from lorafleet_core.storage.manifests import load_folder
from lorafleet_core.storage.standalone_state import save_merge_statuses
from lorafleet_standalone import processes
from lorafleet_standalone.auto_merge import AutoMerge
from lorafleet_standalone.cpu_binding import EngineCores
from lorafleet_standalone.guards import (
    UpError,
    check_ports_free,
    lock_manifests_dir,
    lock_state_dir,
)
from lorafleet_standalone.local_replicas import (
    forget_on_replicas,
    free_port,
    local_replica_count,
    merged_engine_count,
    plan_replicas,
    replica_states,
    start_merged_pools,
)
from lorafleet_standalone.merged import MergedRun, plan_merged_pools
from lorafleet_standalone.planning import plan
from lorafleet_standalone.processes import ReplicaPlan
from lorafleet_standalone.reconciler import Reconciler
from lorafleet_standalone.state_files import (
    CONTROL_TOKEN_FILE,
    RECONCILE_STATUS_FILE,
    REPLICAS_FILE,
)
from lorafleet_standalone.supervisor import StartError, Supervisor
from lorafleet_standalone.up_options import StandaloneSettings, UpOptions, model_dir_of
from lorafleet_standalone.up_status import (
    write_control_token,
    write_replicas_file,
    write_up_status,
)


class _Stop:
    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.requested = True

    def __bool__(self) -> bool:
        return self.requested


def _say(msg: str) -> None:
    print(f"[lorafleet up] {msg}", flush=True)


def _start_processes(
    opts: UpOptions,
    sup: Supervisor,
    replicas: list[ReplicaPlan],
    pool: ReplicaPoolSpec,
    pool_name: str,
    model_dir: Path,
    stop: _Stop,
    token: str,
    cores: EngineCores,
) -> None:
    """vLLM servers (all at once: they take longest), then agents, then the gateway."""
    logs = opts.state_dir / "logs"
    cpu = processes.is_cpu_build()
    build = "CPU" if cpu else "GPU"
    _say(f"starting {len(replicas)} replica(s) of pool {pool_name} ({build} vLLM)")
    engines = [
        sup.start(
            processes.vllm_process(r, model_dir, pool, cpu=cpu, omp_cpus=cores.next(), log_dir=logs)
        )
        for r in replicas
    ]
    for child in engines:
        sup.wait_ready(child, stop=lambda: bool(stop))
        _say(f"{child.spec.name} ready")
    for r in replicas:
        agent = sup.start(
            processes.agent_process(r, pool, model_dir, internal_token=token, log_dir=logs)
        )
        sup.wait_ready(agent, stop=lambda: bool(stop))
        _say(f"{agent.spec.name} ready on {r.data_url}")
    gateway = sup.start(
        processes.gateway_process(
            manifests_dir=opts.manifests_dir.resolve(),
            replicas_file=(opts.state_dir / REPLICAS_FILE).resolve(),
            pool_name=pool_name,
            port=opts.port,
            internal_port=opts.internal_port,
            replica_token=token,
            log_dir=logs,
        )
    )
    sup.wait_ready(gateway, stop=lambda: bool(stop))
    control_port = opts.control_port or free_port()
    control = sup.start(
        processes.control_process(
            manifests_dir=opts.manifests_dir.resolve(),
            replicas_file=(opts.state_dir / REPLICAS_FILE).resolve(),
            port=control_port,
            token_sha256=write_control_token(opts.state_dir),
            replica_token=token,  # forwarded load/unload calls carry the agents' credential
            log_dir=logs,
        )
    )
    sup.wait_ready(control, stop=lambda: bool(stop))
    _say(
        f"control API on http://{processes.LOOPBACK}:{control_port}/internal "
        f"(admin token in {opts.state_dir / CONTROL_TOKEN_FILE})"
    )


def run_up(opts: UpOptions, lock: IO[str] | None = None) -> int:
    """Run until Ctrl-C; `lock` is the state folder's lock when the caller already holds it
    (`lorafleet up` takes it before building the demo into that folder)."""
    settings = StandaloneSettings()
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    sup = Supervisor(
        max_restarts=settings.max_restarts,
        stable_s=settings.stable_s,
        stop_timeout_s=settings.stop_timeout_s,
        restart_backoff_s=settings.restart_backoff_s,
        say=_say,
    )
    replicas: list[ReplicaPlan] = []
    merged: list[MergedRun] = []
    manifests_lock: IO[str] | None = None
    try:
        lock = lock or lock_state_dir(opts.state_dir)
        check_ports_free(
            {
                "gateway": opts.port,
                "gateway internal": opts.internal_port,
                "control API": opts.control_port,
            }
        )
        # Two `up`s on one manifests folder (two state folders) would both write its alias
        # and merge status; with the demo's folder inside the state folder this is a no-op.
        manifests_lock = lock_manifests_dir(opts.manifests_dir)
        first = plan(load_folder(opts.manifests_dir), [], datetime.now(UTC), pool_name=opts.pool)
        if first.pool is None or first.pool_name is None:
            reasons = "; ".join(str(p) for p in first.problems if p.kind == "ReplicaPool")
            raise UpError(f"{opts.manifests_dir} needs one valid ReplicaPool ({reasons})")
        pool, pool_name = first.pool, first.pool_name
        model_dir = opts.model or model_dir_of(pool.base_model.uri)
        if not (model_dir / "config.json").is_file():
            raise UpError(f"no model at {model_dir} (config.json missing); pass --model DIR")

        count = local_replica_count(pool.replicas, opts.replicas, _say, pool_name)
        replicas = plan_replicas(opts.state_dir, pool_name, count)
        for r in replicas:
            r.cache_dir.mkdir(parents=True, exist_ok=True)
        reconciler = Reconciler(
            opts.manifests_dir,
            {r.id: r.annotations_file for r in replicas},
            opts.state_dir / RECONCILE_STATUS_FILE,
            pool_name=pool_name,
            say=_say,
            replan_s=settings.replan_s,
            params=FleetParams(replica_capacity_tps=settings.replica_tokens_per_second),
        )
        reconciler.tick()
        # The agents' internal credential for this run: the gateway posts records with it.
        token = secrets.token_urlsafe(32)
        merged_plans = plan_merged_pools(load_folder(opts.manifests_dir))
        cores = EngineCores.of_this_process(count + merged_engine_count(merged_plans))
        if processes.is_cpu_build():
            _say(cores.describe())
        merged[:] = start_merged_pools(
            opts.state_dir,
            sup,
            merged_plans,
            model_dir,
            token,
            lambda: bool(stop),
            _say,
            cores,
        )

        def publish() -> None:
            # The merged pools' status.merge, which the gateway's folder catalog reads: a
            # merged pool serves its adapter once Ready (rewritten whole: stale pools drop out).
            save_merge_statuses(opts.manifests_dir, {m.pool: m.status for m in merged})
            write_replicas_file(opts.state_dir, replicas, merged)

        publish()
        auto = AutoMerge(
            state_dir=opts.state_dir,
            manifests_dir=opts.manifests_dir,
            sup=sup,
            model_dir=model_dir,
            token=token,
            stop=lambda: bool(stop),
            say=_say,
            runs=merged,
            publish=publish,
            cores=cores,
        )

        _start_processes(opts, sup, replicas, pool, pool_name, model_dir, stop, token, cores)
        write_up_status(opts, replicas, sup, "ready", merged)
        _say(f"gateway ready on http://{processes.LOOPBACK}:{opts.port}")
        if opts.banner:
            print(opts.banner, flush=True)

        last_states = time.monotonic()
        last_error: str | None = None
        while not stop:
            time.sleep(settings.poll_interval_s)
            try:
                states = None
                every_s = (
                    settings.poll_interval_s if reconciler.awaiting_replicas else settings.replan_s
                )
                if time.monotonic() - last_states >= every_s:
                    # Merged replicas too: their traffic is their adapter's (autoMerge).
                    every = replicas + [r for m in merged for r in m.replicas]
                    states, last_states = replica_states(every), time.monotonic()
                result = reconciler.tick(states)
                if result is not None:
                    auto.apply(result)
                if reconciler.removed:  # their manifests went: the agents drop their records
                    reconciler.forgotten(forget_on_replicas(replicas, reconciler.removed, token))
                for event in sup.check():
                    _say(event)
                gone = sup.essential_failure()
                if gone is not None:
                    _say(f"{gone.spec.name} {gone.failed}: nothing is served without it")
                    return 1
                write_up_status(opts, replicas, sup, "ready", merged)
                if last_error is not None:
                    _say("reconcile recovered")
                last_error = None
            except Exception as exc:  # one bad tick must not take the fleet down
                # Once per distinct error, not every poll interval for as long as it lasts.
                if repr(exc) != last_error:
                    _say(f"reconcile error (retrying): {exc!r}")
                last_error = repr(exc)
        _say("shutting down")
        return 0
    except StartError as exc:
        if stop:
            _say("interrupted during start-up")
            return 0
        _say(f"start-up failed: {exc}")
        return 1
    except UpError as exc:
        _say(f"error: {exc}")
        return 1  # exit 1: it could not start (2 is for a wrong command line)
    finally:
        sup.stop_all()
        if lock is not None:
            lock.close()
        if manifests_lock is not None:
            manifests_lock.close()
        if replicas:
            write_up_status(opts, replicas, sup, "stopped", merged)
        for s, handler in old.items():
            signal.signal(s, handler)
        _say("stopped")
        sys.stdout.flush()
