"""Gateway overhead: TTFT direct to a replica vs a bare pass-through hop vs the full gateway.

One run, same upstream, loopback, streaming at a fixed rate (default 40 requests/s) per target.
Targets run in alternating short rounds (direct, hop, gateway, direct, ...) so background load
on a shared machine hits all three alike. Prints p50/p99 TTFT, the TTFT each hop adds over
direct, the gateway/hop ratios against the targets (1.25x at p50, 1.5x at p99), and the CPU
seconds per request of the hop and the gateway processes.

    .venv/bin/python -m benchmarks.gateway_overhead [--rate 40] [--rounds 6] [--round-s 5]

Processes: the upstream stand-in (Starlette, streams a few SSE chunks, answers /state), the
bare hop (Starlette + httpx streaming, no logic), both in gateway_overhead_servers.py, and the
gateway (`python -m lorafleet_gateway` with auth, alias resolution, rate limits, routing over 4
replica ids, metrics and request logging all on) each run in their own process under uvicorn
with the same settings.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import psutil
import yaml

from benchmarks.results import Result
from benchmarks.source_roots import pythonpath
from lorafleet_core.wire.agent_api import state_url

ROOT = Path(__file__).resolve().parents[1]
# The upstream stand-in and the bare hop, each run as its own process.
SERVERS = str(Path(__file__).with_name("gateway_overhead_servers.py"))
N_TENANTS = 1000
N_REPLICA_IDS = 4


# ---------------------------------------------------------------------------------------------
# Setup


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def key_of(i: int) -> str:
    return f"lf-bench-key-{i:05d}"


def write_manifests(folder: Path, upstream: str) -> None:
    from lorafleet_core.api.apikeys import TenantKeys, hash_key

    base = "sha256:" + "b" * 64
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "lorafleet.dev/v1alpha1",
            "kind": "ReplicaPool",
            "metadata": {"name": "default"},
            "spec": {"baseModel": {"name": "m", "hash": base, "uri": "file:///m"}},
        }
    ]
    for i in range(N_TENANTS):
        tenant, name = f"t{i:05d}", f"t{i:05d}-a-v1"
        docs.append(
            {
                "apiVersion": "lorafleet.dev/v1alpha1",
                "kind": "LoRAAdapter",
                "metadata": {"name": name},
                "spec": {
                    "tenant": tenant,
                    "version": "v1",
                    "baseModelHash": base,
                    "rank": 16,
                    "alpha": 32,
                    "targetModules": ["q_proj"],
                    "weightsUri": f"file:///a/{name}",
                    "checksum": "sha256:" + f"{i:064x}",
                },
            }
        )
        docs.append(
            {
                "apiVersion": "lorafleet.dev/v1alpha1",
                "kind": "AdapterAlias",
                "metadata": {"name": f"{tenant}-a-prod"},
                "spec": {"model": f"{tenant}/a:prod", "tenant": tenant, "adapter": name},
            }
        )
        docs.append(TenantKeys(tenant=tenant, key_hashes=(hash_key(key_of(i)),)).to_secret())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fleet.yaml").write_text(yaml.safe_dump_all(docs))
    replicas = [
        {"id": f"replica-{j}", "dataUrl": upstream, "internalUrl": upstream}
        for j in range(N_REPLICA_IDS)
    ]
    (folder / "replicas.yaml").write_text(yaml.safe_dump({"replicas": replicas}))


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def wait_up(url: str, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient() as c:
        while time.monotonic() < deadline:
            try:
                if (await c.get(url)).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(url)


# ---------------------------------------------------------------------------------------------
# Load


async def one(client: httpx.AsyncClient, url: str, tenant: int, gateway: bool) -> float | None:
    body = {
        "model": f"t{tenant:05d}/a:prod" if gateway else f"t{tenant:05d}-a-v1",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 16,
        "stream": True,
    }
    headers = {"authorization": f"Bearer {key_of(tenant)}"}
    t0 = time.perf_counter()
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        ttft = None
        async for chunk in resp.aiter_raw():
            if ttft is None and chunk:
                ttft = time.perf_counter() - t0
        if resp.status_code != 200:
            return None
    return ttft


async def run_round(
    client: httpx.AsyncClient,
    url: str,
    gateway: bool,
    rate: float,
    seconds: float,
    out: list[float],
    errors: list[int],
) -> None:
    tasks = []
    n = int(rate * seconds)
    start = time.perf_counter()
    rng = random.Random(7)
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tenant = min(int(rng.paretovariate(1.0)) - 1, N_TENANTS - 1)  # skewed, like Zipf
        tasks.append(asyncio.create_task(one(client, url, tenant, gateway)))
    for ttft in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(ttft, float):
            out.append(ttft)
        else:
            errors.append(1)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


@dataclass
class Fleet:
    procs: list[subprocess.Popen[bytes]]
    targets: dict[str, tuple[str, bool, int | None]]  # name -> (url, via gateway, pid)
    ready_urls: list[str]


def launch(tmp: Path, log: IO[bytes]) -> Fleet:
    """Start the upstream, the bare hop and the gateway, each in its own process."""
    py = sys.executable
    up_port, hop_port, gw_port, gw_int = free_port(), free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    write_manifests(tmp / "manifests", upstream)
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath(ROOT),
    }
    gw_env = {
        **env,
        "LORAFLEET_GATEWAY_HOST": "127.0.0.1",
        "LORAFLEET_GATEWAY_PORT": str(gw_port),
        "LORAFLEET_GATEWAY_INTERNAL_PORT": str(gw_int),
        "LORAFLEET_GATEWAY_MANIFESTS_DIR": str(tmp / "manifests"),
        "LORAFLEET_GATEWAY_REQUESTS_PER_SECOND": "1000",
        "LORAFLEET_GATEWAY_TOKENS_PER_MINUTE": "10000000",
    }
    procs = [
        subprocess.Popen([py, SERVERS, "upstream", "--port", str(up_port)], env=env),
        subprocess.Popen(
            [py, SERVERS, "hop", "--port", str(hop_port), "--upstream", upstream], env=env
        ),
        subprocess.Popen([py, "-m", "lorafleet_gateway"], env=gw_env, stderr=log),
    ]
    return Fleet(
        procs,
        {
            "direct": (f"{upstream}/v1/chat/completions", False, None),
            "hop": (f"http://127.0.0.1:{hop_port}/v1/chat/completions", False, procs[1].pid),
            "gateway": (f"http://127.0.0.1:{gw_port}/v1/chat/completions", True, procs[2].pid),
        },
        [state_url(upstream, "x"), f"http://127.0.0.1:{gw_int}/readyz"],
    )


async def measure(
    args: argparse.Namespace, fleet: Fleet
) -> tuple[dict[str, list[float]], dict[str, int], dict[str, float]]:
    for url in fleet.ready_urls:
        await wait_up(url)
    ttft: dict[str, list[float]] = {k: [] for k in fleet.targets}
    errors: dict[str, list[int]] = {k: [] for k in fleet.targets}
    cpu: dict[str, float] = dict.fromkeys(fleet.targets, 0.0)
    limits = httpx.Limits(max_keepalive_connections=256, max_connections=None)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        for url, via_gw, _pid in fleet.targets.values():  # warm-up, not measured
            await run_round(client, url, via_gw, args.rate, 2.0, [], [])
        for _ in range(args.rounds):
            for name, (url, via_gw, pid) in fleet.targets.items():
                before = cpu_seconds(pid) if pid else 0.0
                await run_round(
                    client, url, via_gw, args.rate, args.round_s, ttft[name], errors[name]
                )
                cpu[name] += (cpu_seconds(pid) - before) if pid else 0.0
    return ttft, {k: len(v) for k, v in errors.items()}, cpu


def report(
    args: argparse.Namespace,
    ttft: dict[str, list[float]],
    errors: dict[str, int],
    cpu: dict[str, float],
    log_lines: int,
) -> bool:
    ms = 1000.0
    columns = ["target", "n", "errors", "p50 ms", "p99 ms", "mean ms", "adds p50 ms",
               "adds p99 ms", "CPU ms/request"]  # fmt: skip
    result = Result("gateway_overhead", columns)
    result.notes.append(
        f"TTFT, streaming, {args.rate:g} requests/s per target, {args.rounds} rounds x "
        f"{args.round_s:g} s, loopback"
    )
    for name, v in ttft.items():
        cpu_ms = cpu[name] / max(1, len(v)) * ms if name != "direct" else None
        result.add(
            target=name,
            n=len(v),
            errors=errors[name],
            **{
                "p50 ms": round(pct(v, 50) * ms, 2),
                "p99 ms": round(pct(v, 99) * ms, 2),
                "mean ms": round(statistics.fmean(v) * ms, 2),
                "adds p50 ms": round((pct(v, 50) - pct(ttft["direct"], 50)) * ms, 2),
                "adds p99 ms": round((pct(v, 99) - pct(ttft["direct"], 99)) * ms, 2),
                "CPU ms/request": "–" if cpu_ms is None else round(cpu_ms, 2),
            },
        )
    ok = not any(errors.values())
    for q, target in ((50, 1.25), (99, 1.5)):
        base = pct(ttft["direct"], q)
        hop_ms = (pct(ttft["hop"], q) - base) * ms
        gw_ms = (pct(ttft["gateway"], q) - base) * ms
        ratio = gw_ms / hop_ms if hop_ms > 0 else float("inf")
        ok = ok and ratio <= target
        verdict = "ok" if ratio <= target else "OVER TARGET"
        result.notes.append(
            f"p{q}: the gateway adds {ratio:.2f} x what the bare hop adds (target <= {target}) "
            f"{verdict}"
        )
    result.notes.append(f"gateway request log lines written: {log_lines}")
    result.details = {"ttft_s": ttft, "errors": errors, "cpu_s": cpu}
    result.emit(args.out)
    return ok


def bench(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="lorafleet-bench-"))
    with (tmp / "gateway.log").open("wb") as log:
        fleet = launch(tmp, log)
        try:
            ttft, errors, cpu = asyncio.run(measure(args, fleet))
        finally:
            for p in fleet.procs:
                p.terminate()
            for p in fleet.procs:
                p.wait(timeout=10)
    # The request log is part of "everything on": count its lines to show it was written.
    log_lines = (tmp / "gateway.log").read_text().count('"adapter_id"')
    return 0 if report(args, ttft, errors, cpu, log_lines) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=40.0, help="requests/s per target")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    return bench(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
