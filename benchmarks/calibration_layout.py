"""The calibration's CPU layout: which cores vLLM's engine and the request path may run on (I/O).

`shared` (what `lorafleet up` does with its one engine): vLLM binds its worker's OMP threads to
one core (`lorafleet up`'s cpu_binding gives a lone engine every core but the last, as
`VLLM_CPU_OMP_THREADS_BIND=auto` would, and keeps the last for the rest) and every other
process, vLLM's EngineCore included, may run on every core. On this 2-core machine the
EngineCore and the worker busy-poll their shared-memory queues (`sched_yield` for 1 s after
each message, vLLM's `shm_broadcast`), so while the engine steps the path's processes (gateway,
agent, vLLM's API server, the load client) compete with ~2 runnable engine threads, and the
stall probe sees them stopped for hundreds of ms.

`pinned`: the engine's processes (EngineCore and worker, every thread) on `engine_cpus`, the
path's (the `lorafleet up` supervisor, gateway, agent, vLLM's API server and the load client
itself) on the others, set with `sched_setaffinity` on every thread once the fleet is ready;
threads started later inherit their creator's mask. That is the layout of a GPU node, where
the engine's compute does not use the host cores the gateway and agent run on (its EngineCore
still polls, on a core of its own among many). The host probe then reads the masks it finds,
so `host_cores` and the engine's competing threads follow from the layout, not from a flag.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

LAYOUTS = ("shared", "pinned")
ENGINE_ROLES = ("engine_core", "worker")


def _tids(pid: int) -> list[int]:
    return sorted(int(t.name) for t in Path(f"/proc/{pid}/task").glob("*") if t.name.isdigit())


def pin_threads(pid: int, cpus: set[int]) -> int:
    """Every thread of `pid` onto `cpus`; returns how many threads were set."""
    n = 0
    for tid in _tids(pid):
        try:
            os.sched_setaffinity(tid, cpus)
            n += 1
        except OSError:  # a thread that ended meanwhile
            continue
    return n


def split_cpus(cpus: set[int]) -> tuple[set[int], set[int]]:
    """(engine, path) cores: the engine gets the lowest core, where `lorafleet up` (and vLLM's
    auto OMP binding) already puts a lone engine's worker, the path the rest."""
    if len(cpus) < 2:
        raise ValueError("the pinned layout needs at least 2 cores")
    ordered = sorted(cpus)
    return {ordered[0]}, set(ordered[1:])


def apply_layout(layout: str, roles: dict[str, list[int]]) -> dict[str, Any]:
    """Put the fleet's processes (`roles`: role -> pids, as `FleetProcesses.of` finds them)
    on their cores; `shared` changes nothing. Returns what was set, for the measured JSON."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}")
    if layout == "shared":
        return {"layout": "shared"}
    # The cores the fleet may use now: the union of its processes' masks.
    engine, path = split_cpus(
        set().union(*(os.sched_getaffinity(p) for ps in roles.values() for p in ps))
    )
    threads: dict[str, int] = {}
    for role, pids in roles.items():
        cpus = engine if role in ENGINE_ROLES else path
        threads[role] = sum(pin_threads(pid, cpus) for pid in pids)
    return {
        "layout": "pinned",
        "engine_cpus": sorted(engine),
        "path_cpus": sorted(path),
        "threads_pinned": threads,
    }
