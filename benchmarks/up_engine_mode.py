"""One `lorafleet up` (demo, 1 replica) of a given checkout: time to ready, then chat requests.

    AB_N=600 .venv/bin/python -m benchmarks.up_engine_mode LABEL SRC_ROOT OUT_JSON

`SRC_ROOT` is the checkout whose code `up` runs (its source roots go first on `up`'s
PYTHONPATH), so two checkouts can be compared back to back on the same machine: e.g. the CPU
engine in a worker process of its own (before 2026-12-06) against the model in vLLM's
engine-core process (docs/design/0024, addendum). The gateway's rate limit is lifted so it
refuses nothing. After six warm-up requests (every demo adapter loaded, both paths), AB_N
requests (half streamed) at 4 in flight, 16 output tokens at most. Reported (a
benchmarks.results document at OUT_JSON): seconds to ready, requests/s, TTFT p50 of the
streamed ones, latency p50 of the others, and in its details vLLM's process tree (each
process's cores, OMP_NUM_THREADS, VLLM_ENABLE_V1_MULTIPROCESSING, VLLM_CPU_OMP_THREADS_BIND).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.results import Result
from tests.standalone.up_harness import prepare_demo_folder, running_up

COLUMNS = ("label", "n", "ok", "ready_s", "req_per_s", "ttft_p50_ms", "nonstream_p50_ms")


def source_roots(checkout: Path) -> list[str]:
    """The checkout's own source roots, as its pyproject.toml lists them for setuptools."""
    pyproject = tomllib.loads((checkout / "pyproject.toml").read_text())
    roots: list[str] = pyproject["tool"]["setuptools"]["packages"]["find"]["where"]
    return roots


MODELS = ["demo/otter:prod", "demo/falcon:prod", "demo/zebra:prod"]
IN_FLIGHT = 4
MAX_TOKENS = 16

# (status, streamed, TTFT s or None, latency s)
Answer = tuple[int, bool, float | None, float]


async def one(http: httpx.AsyncClient, url: str, i: int) -> Answer:
    body: dict[str, Any] = {
        "model": MODELS[i % len(MODELS)],
        "messages": [{"role": "user", "content": f"Tell me about the weather today {i}"}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    t0 = time.monotonic()
    if i % 2 == 0:
        body["stream"] = True
        ttft = None
        async with http.stream("POST", url, json=body) as r:
            async for line in r.aiter_lines():
                if ttft is None and line.startswith("data: {") and '"content"' in line:
                    ttft = time.monotonic() - t0
        return r.status_code, True, ttft, time.monotonic() - t0
    answer = await http.post(url, json=body)
    return answer.status_code, False, None, time.monotonic() - t0


async def load(url: str, key: str, n: int) -> tuple[list[Answer], float]:
    slots = asyncio.Semaphore(IN_FLIGHT)
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=120) as http:
        for i in range(6):
            await one(http, url, i)

        async def guarded(i: int) -> Answer:
            async with slots:
                return await one(http, url, i)

        t0 = time.monotonic()
        results = await asyncio.gather(*(guarded(i) for i in range(n)))
        return list(results), time.monotonic() - t0


def vllm_tree(pid: int) -> list[dict[str, Any]]:
    top = psutil.Process(pid)
    rows = []
    for p in [top, *top.children(recursive=True)]:
        env = p.environ()
        rows.append(
            {
                "pid": p.pid,
                "name": " ".join(p.cmdline()[:3])[:60],
                "cpus": sorted(p.cpu_affinity() or []),
                **{
                    k: env.get(k)
                    for k in (
                        "OMP_NUM_THREADS",
                        "VLLM_ENABLE_V1_MULTIPROCESSING",
                        "VLLM_CPU_OMP_THREADS_BIND",
                    )
                },
            }
        )
    return rows


def main() -> None:
    label, root, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    n = int(os.environ.get("AB_N", "600"))
    env = {
        "PYTHONPATH": ":".join([*(str(root / r) for r in source_roots(root)), str(root)]),
        "LORAFLEET_GATEWAY_REQUESTS_PER_SECOND": "1000",
    }
    with tempfile.TemporaryDirectory(prefix="up-engine-mode-") as tmp:
        state = Path(tmp) / "state"
        prepare_demo_folder(state)
        t0 = time.monotonic()
        with running_up(state, within_s=600, env=env) as up:
            ready_s = time.monotonic() - t0
            status = up.status()
            tree = vllm_tree(status["processes"]["demo-0/vllm"]["pid"])
            key = (state / "demo-api-key").read_text().strip()
            url = status["gateway"]["url"] + "/v1/chat/completions"
            results, wall = asyncio.run(load(url, key, n))
    ok = [r for r in results if r[0] == 200]
    ttfts = [r[2] for r in ok if r[1] and r[2] is not None]
    plain = [r[3] for r in ok if not r[1]]
    result = Result("up_engine_mode", list(COLUMNS))
    result.add(
        label=label,
        n=n,
        ok=len(ok),
        ready_s=round(ready_s, 1),
        req_per_s=round(len(ok) / wall, 2),
        ttft_p50_ms=round(1000 * statistics.median(ttfts)),
        nonstream_p50_ms=round(1000 * statistics.median(plain)),
    )
    result.notes.append(f"checkout {root}; {IN_FLIGHT} in flight, max_tokens {MAX_TOKENS}")
    result.details["vllm_tree"] = tree
    result.emit(out)


if __name__ == "__main__":
    main()
