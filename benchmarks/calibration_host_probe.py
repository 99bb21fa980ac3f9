"""The host-CPU probe of the calibration: what the request path outside vLLM's engine costs in
CPU seconds, per request and per streamed token (I/O; the model is `lorafleet_sim.host`).

On the calibration machine vLLM's engine process keeps its own core, and the gateway, the
agent, vLLM's API server process, the `lorafleet up` supervisor and the load client share what
is left, so a request's first token waits for the CPU that other requests' streams are using.
The simulator models that host as a processor-sharing server; this probe measures its inputs
from the processes' own CPU counters (psutil: user + system time of each process), never from
a replay's latencies:

- `background`: each process's CPU rate over an idle window (the gateway's 1 s state poll,
  the agent's pre-warm poll, ...), subtracted from every measurement below;
- for max_tokens 1 and 8, `requests` requests of one hot (GPU-slot) alias at concurrency 1,
  and again at concurrency 4: CPU seconds per request of every process. The line through
  (tokens per request, CPU per request) at concurrency 1 gives the CPU per streamed token;
  concurrency 4 is a check that the work per request does not change under contention (what
  a processor-sharing model assumes);
- at concurrency 1 the CPU counters are also read when the client sees the first token: the
  CPU spent between sending and the first token is what delays a first token when the host is
  contended (`host_ttft_cpu_s`); the rest of a one-token request is the work after its last
  token (`host_end_cpu_s`: usage records, closing the stream in every hop).
- which CPUs each process may run on (`cpu_affinity`): the host's cores are those the path
  processes may use minus those the engine is pinned to.

    python benchmarks/calibration_host_probe.py   # alone, prints JSON
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calibration_probes import TOKENS_PER_WORD, scrape
from lorafleet_loadtest.driver import Target
from lorafleet_loadtest.plan import prompt_text
from lorafleet_loadtest.probe.client import make_client, stream_chat
from lorafleet_loadtest.probe.results import RequestResult

PATH_ROLES = ("gateway", "agent", "api_server", "client")  # a request's own work
HOST_ROLES = (*PATH_ROLES, "supervisor")  # everything on the host CPU (background included)
ENGINE_ROLES = ("engine_core", "worker")
# vLLM's own sums over a group: its TTFT, and the engine's busy time (prefill + decode; at
# concurrency 1 requests never overlap, so their sum is the time the engine was stepping).
VLLM_SUMS = (
    "time_to_first_token_seconds_sum",
    "time_to_first_token_seconds_count",
    "request_inference_time_seconds_sum",
    "request_prefill_time_seconds_sum",
)
PROMPT_TOKENS = 20  # planned; ~30 as the engine counts them, the replays' median


@dataclass
class FleetProcesses:
    """The calibration fleet's processes by role (`engine`: vLLM's engine core and helpers)."""

    roles: dict[str, list[psutil.Process]] = field(default_factory=dict)

    @classmethod
    def of(cls, root_pid: int) -> FleetProcesses:
        root = psutil.Process(root_pid)
        roles: dict[str, list[psutil.Process]] = {
            "supervisor": [root],
            "client": [psutil.Process()],
        }
        children = root.children(recursive=True)
        api = [p for p in children if "vllm.entrypoints" in " ".join(p.cmdline())]
        under_api = {c.pid for a in api for c in a.children(recursive=True)}
        for p in children:
            cmd = " ".join(p.cmdline())
            if "lorafleet_gateway" in cmd:
                role = "gateway"
            elif "lorafleet_agent" in cmd:
                role = "agent"
            elif p in api:
                role = "api_server"
            elif p.pid in under_api:
                # vLLM's EngineCore (scheduler) and its Worker (the model's OMP threads)
                role = "worker" if "Worker" in cmd or "Worker" in p.name() else "engine_core"
            else:
                role = "other"
            roles.setdefault(role, []).append(p)
        return cls(roles)

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far, per role: the kernel's per-thread run time in nanoseconds
        (/proc/PID/task/TID/schedstat), since psutil's user + system times move in 10 ms
        ticks, coarser than one request's work. Threads that ended are not counted; the
        processes here keep theirs (event loops, executors, OMP pools)."""
        out: dict[str, float] = {}
        for role, procs in self.roles.items():
            total = 0.0
            for p in procs:
                total += _run_time_s(p)
            out[role] = total
        return out

    def affinity(self) -> dict[str, dict[str, list[int]]]:
        """The CPUs each process's threads may run on: {role: {pid/tid: cpus}}."""
        out: dict[str, dict[str, list[int]]] = {}
        for role, procs in self.roles.items():
            threads: dict[str, list[int]] = {}
            for p in procs:
                for task in Path(f"/proc/{p.pid}/task").glob("*"):
                    try:
                        threads[f"{p.pid}/{task.name}"] = sorted(
                            os.sched_getaffinity(int(task.name))
                        )
                    except OSError:
                        continue
            out[role] = threads
        return out


def _run_time_s(p: psutil.Process) -> float:
    total_ns = 0
    found = False
    for stat in Path(f"/proc/{p.pid}/task").glob("*/schedstat"):
        try:
            total_ns += int(stat.read_text().split()[0])
            found = True
        except (OSError, ValueError, IndexError):
            continue
    if found:
        return total_ns / 1e9
    try:  # no schedstat (kernel without CONFIG_SCHED_INFO): psutil's ticks
        t = p.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(t.user + t.system)


def _minus(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0.0) - b.get(k, 0.0) for k in a}


async def _request(
    target: Target, client: Any, mt: int, index: int, on_first: Any = None
) -> RequestResult:
    return await stream_chat(
        client,
        index=index,
        alias=target.aliases[0],
        prompt=prompt_text(PROMPT_TOKENS, index, TOKENS_PER_WORD),
        max_tokens=mt,
        marker=None,
        scheduled_at=0.0,
        run_t0=time.perf_counter(),
        on_first_token=on_first,
    )


async def _rounds(
    target: Target,
    vllm_url: str,
    procs: FleetProcesses,
    concurrencies: Sequence[int],
    max_tokens: Sequence[int],
    requests: int,
    idle_s: float,
    settle_s: float,
) -> dict[str, Any]:
    client = make_client(target.base_url, target.api_key, 120.0)
    try:
        for i in range(3):  # the alias into a GPU slot, connections warm
            await _request(target, client, 2, 90_000 + i)
        t0, c0 = time.perf_counter(), procs.cpu()
        await asyncio.sleep(idle_s)
        t1, c1 = time.perf_counter(), procs.cpu()
        background = {k: v / (t1 - t0) for k, v in _minus(c1, c0).items()}
        n = 50
        p0 = time.process_time()
        for _ in range(n):
            procs.cpu()
        snapshot_s = (time.process_time() - p0) / n
        groups = []
        for mt in max_tokens:
            for k in concurrencies:
                before_m = await asyncio.to_thread(scrape, vllm_url)
                t0, c0 = time.perf_counter(), procs.cpu()
                first: list[dict[str, float]] = []
                results: list[RequestResult] = []
                snapshots = 0
                for rep in range(max(1, requests // k)):
                    base = 100_000 + mt * 10_000 + k * 1_000 + rep * 10
                    if k == 1:
                        marks: list[dict[str, float]] = []
                        c_send = procs.cpu()
                        res = await _request(
                            target, client, mt, base, lambda m=marks: m.append(procs.cpu())
                        )
                        snapshots += 1 + len(marks)
                        results.append(res)
                        if marks and res.ttft_s is not None:
                            dt = res.ttft_s
                            pre = _minus(marks[0], c_send)
                            pre = {r: v - background.get(r, 0.0) * dt for r, v in pre.items()}
                            pre["client"] = pre.get("client", 0.0) - snapshot_s
                            first.append(pre)
                    else:
                        results += await asyncio.gather(
                            *(_request(target, client, mt, base + i) for i in range(k))
                        )
                await asyncio.sleep(settle_s)  # the hops' bookkeeping after the stream's end
                t1, c1 = time.perf_counter(), procs.cpu()
                after_m = await asyncio.to_thread(scrape, vllm_url)
                ok = [r for r in results if r.ok]
                wall = t1 - t0
                used = _minus(c1, c0)
                used["client"] = used.get("client", 0.0) - snapshots * snapshot_s
                per_req = {
                    r: (v - background.get(r, 0.0) * wall) / max(1, len(ok))
                    for r, v in used.items()
                }
                vllm = {
                    name: after_m.get(f"vllm:{name}", 0.0) - before_m.get(f"vllm:{name}", 0.0)
                    for name in VLLM_SUMS
                }
                groups.append(
                    {
                        "max_tokens": mt,
                        "concurrency": k,
                        "requests": len(ok),
                        "wall_s": wall,
                        "tokens_per_request": statistics.mean(r.completion_tokens or 0 for r in ok),
                        "cpu_per_request_s": per_req,
                        "path_cpu_per_request_s": sum(per_req.get(r, 0.0) for r in PATH_ROLES),
                        "client_ttft_mean_s": statistics.mean(r.ttft_s or 0.0 for r in ok),
                        "vllm": vllm,
                        "first_token_cpu_s": {
                            r: statistics.mean(f.get(r, 0.0) for f in first) for r in first[0]
                        }
                        if first
                        else None,
                    }
                )
    finally:
        await client.close()
    return {"background_cores": background, "snapshot_cpu_s": snapshot_s, "groups": groups}


def _cpus(doc: dict[str, Any], roles: Sequence[str]) -> set[int]:
    """The CPUs any thread of these roles may run on (`FleetProcesses.affinity`)."""
    return {c for r in roles for t in doc["affinity"].get(r, {}).values() for c in t}


def fit(doc: dict[str, Any]) -> dict[str, float]:
    """The host model's parameters (`ReplicaParams.host_*`) from the probe's groups."""
    one = sorted((g for g in doc["groups"] if g["concurrency"] == 1), key=lambda g: g["max_tokens"])
    lo, hi = one[0], one[-1]
    dn = hi["tokens_per_request"] - lo["tokens_per_request"]
    dc = hi["path_cpu_per_request_s"] - lo["path_cpu_per_request_s"]
    per_token = max(0.0, dc / dn) if dn > 0 else 0.0
    ttft = statistics.mean(
        sum(g["first_token_cpu_s"].get(r, 0.0) for r in PATH_ROLES)
        for g in one
        if g["first_token_cpu_s"]
    )
    end = lo["path_cpu_per_request_s"] - ttft - per_token * max(0.0, lo["tokens_per_request"] - 1)
    # The host's cores are those the path's processes may run on (their measured CPU masks);
    # a process competes for them only if its own mask reaches one (the `pinned` layout
    # keeps vLLM's engine off them: benchmarks/calibration_layout.py).
    cpus = _cpus(doc, HOST_ROLES)
    on_host = [r for r in doc["background_cores"] if r in HOST_ROLES or _cpus(doc, (r,)) & cpus]
    # The engine's processes use CPU the path could have used while they step (the worker's
    # OMP threads, the EngineCore's scheduler loop): their CPU above the idle rate, per
    # second of engine busy time.
    engine = [r for r in ENGINE_ROLES if r in on_host or not doc["affinity"].get(r)]
    engine_cpu = sum(
        g["requests"] * sum(g["cpu_per_request_s"].get(r, 0.0) for r in engine) for g in one
    )
    busy = sum(g["vllm"]["request_inference_time_seconds_sum"] for g in one)
    return {
        "host_cores": float(len(cpus)),
        "host_ttft_cpu_s": max(0.0, ttft),
        "host_token_cpu_s": per_token,
        "host_end_cpu_s": max(0.0, end),
        "host_background": sum(doc["background_cores"][r] for r in on_host),
        "host_engine_busy": max(0.0, engine_cpu / busy) if busy > 0 else 0.0,
    }


def probe_host(
    target: Target,
    vllm_url: str,
    root_pid: int,
    concurrencies: Sequence[int] = (1, 4),
    max_tokens: Sequence[int] = (1, 8),
    requests: int = 24,
    idle_s: float = 3.0,
    settle_s: float = 0.3,
) -> dict[str, Any]:
    procs = FleetProcesses.of(root_pid)
    doc = asyncio.run(
        _rounds(target, vllm_url, procs, concurrencies, max_tokens, requests, idle_s, settle_s)
    )
    doc["affinity"] = procs.affinity()
    doc["pids"] = {r: [p.pid for p in ps] for r, ps in procs.roles.items()}
    doc["cpu_count"] = psutil.cpu_count()
    doc["fit"] = fit(doc)
    return doc


def main() -> int:
    from e2e.standalone_fleet import FleetOptions, started_fleet

    with started_fleet(FleetOptions(replicas=1, gpu_slots=2, host_ram_slots=4, copies=3)) as f:
        up = json.loads((f.state_dir / "up.json").read_text())
        target = Target(f.base_url, f.api_key, {}, aliases=tuple(f.aliases))
        doc = probe_host(target, up["replicas"][0]["vllmUrl"], f.proc.pid)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
