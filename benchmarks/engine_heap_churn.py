"""vLLM Worker memory under LoRA churn, per allocator setting: does a malloc knob bound it?

    .venv/bin/python -m benchmarks.engine_heap_churn
    .venv/bin/python -m benchmarks.engine_heap_churn --duration 60 --variants glibc,arena2

The soak (docs/reference/reliability.md) saw vLLM's `VLLM::Worker` process (the one that runs
the model and the LoRA manager) grow 245-400 MiB in its `[heap]` in 10 minutes while adapters
cycled through 2 GPU / 4 RAM slots. This reproduces that churn against one real vLLM and nothing
else (no lorafleet in front): each round registers the next adapter under a fresh name
(`/v1/load_lora_adapter`, which also loads it into the engine), sends it one request and
unregisters the oldest once `--registered` are held, while `--concurrency` clients keep
sending chat completions to the registered adapters (so loads happen between batches, as on a
replica). Each distinct name is a real load: vLLM caches adapters by name, and a fresh name
per version is what the agent does.

The same churn runs once per variant, one vLLM at a time (each started with the standalone
command line, `lorafleet_standalone.processes.vllm_process`, and the variant's allocator
environment in place of the shipped one):

    glibc      no allocator settings (glibc's defaults: dynamic mmap threshold, 8 x cores arenas)
    arena2     MALLOC_ARENA_MAX=2
    fixed      MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072 (static thresholds)
    jemalloc   LD_PRELOAD the system's libjemalloc.so.2 (skipped when it is not installed)

Per variant: the Worker's RSS and its `[heap]` mapping's resident size every `--sample-interval`
s, the least-squares slope after `--warmup` s (MiB per 100 adapter loads, and per minute), the
rise over the run, adapter loads/s and completion tokens/s of the clients (the throughput a
knob must not cost). Output: a table, JSON (`--out`), a PNG (`--plot`: RSS and heap over
adapter loads) and the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.results import Result
from benchmarks.soak_rss import MIB, fit_slope
from benchmarks.vllm_server import stop, wait_healthy
from lorafleet_core.api.models import BaseModelRef, EngineSpec, ReplicaPoolSpec
from lorafleet_demo.assets import DEFAULT_MARKERS, ensure_demo_assets
from lorafleet_standalone.processes import ReplicaPlan, vllm_process

WORDS = ["the", "a", "support", "order", "refund", "ticket", "account", "billing", "hello"]
REPO = Path(__file__).resolve().parent.parent
JEMALLOC = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
ALLOCATOR_KEYS = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

VARIANTS: dict[str, dict[str, str]] = {
    "glibc": {},
    "arena2": {"MALLOC_ARENA_MAX": "2"},
    "fixed": {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"},
    "jemalloc": {"LD_PRELOAD": str(JEMALLOC)},
}


@dataclass
class Point:
    t: float  # seconds since the churn started
    loads: int  # adapter loads so far
    rss_mib: float
    heap_mib: float  # resident size of the Worker's [heap] (glibc's main arena)


@dataclass
class VariantResult:
    name: str
    env: dict[str, str]
    points: list[Point] = field(default_factory=list)
    loads: int = 0
    requests: int = 0
    tokens: int = 0
    errors: int = 0
    seconds: float = 0.0

    def summary(self, warmup_s: float) -> dict[str, Any]:
        late = [p for p in self.points if p.t >= warmup_s] or self.points
        loads = [float(p.loads) for p in late]
        first, last = self.points[0], self.points[-1]
        return {
            "variant": self.name,
            "env": " ".join(f"{k}={v}" for k, v in self.env.items()) or "(none)",
            "rss_first_mib": round(first.rss_mib, 1),
            "rss_last_mib": round(last.rss_mib, 1),
            "rss_max_mib": round(max(p.rss_mib for p in self.points), 1),
            "heap_first_mib": round(first.heap_mib, 1),
            "heap_last_mib": round(last.heap_mib, 1),
            "rss_mib_per_100_loads": round(100 * fit_slope(loads, [p.rss_mib for p in late]), 2),
            "heap_mib_per_100_loads": round(100 * fit_slope(loads, [p.heap_mib for p in late]), 2),
            "rss_mib_per_min": round(
                fit_slope([p.t / 60 for p in late], [p.rss_mib for p in late]), 2
            ),
            "loads": self.loads,
            "loads_per_s": round(self.loads / self.seconds, 2),
            "requests": self.requests,
            "tokens_per_s": round(self.tokens / self.seconds, 1),
            "errors": self.errors,
        }


def worker_of(pid: int) -> psutil.Process | None:
    """The engine's `VLLM::Worker` descendant (the model runner), else its engine core."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    named = {c.name(): c for c in children}
    for prefix in ("VLLM::Worker", "VLLM::EngineCore"):
        for name, proc in named.items():
            if name.startswith(prefix):
                return proc
    return None


def heap_mib(proc: psutil.Process) -> float:
    return sum(m.rss for m in proc.memory_maps(grouped=False) if m.path == "[heap]") / MIB


@contextlib.contextmanager
def started_vllm(variant: dict[str, str], model: Path, log: Path) -> Iterator[tuple[str, int]]:
    home = Path(tempfile.mkdtemp(prefix="heap-churn-"))
    port = 18000 + random.randrange(2000)
    replica = ReplicaPlan(id="churn-0", vllm_port=port, data_port=0, internal_port=0, home=home)
    pool = ReplicaPoolSpec(
        base_model=BaseModelRef(name="base", hash="sha256:" + "0" * 64, uri=str(model)),
        engine=EngineSpec(gpu_slots=2, host_ram_slots=4, max_rank=16, max_model_len=256),
    )
    spec = vllm_process(replica, model, pool, cpu=True, log_dir=home)
    env = {k: v for k, v in os.environ.items() if k not in (*ALLOCATOR_KEYS, "VLLM_API_KEY")}
    env |= {k: v for k, v in spec.env.items() if k not in ALLOCATOR_KEYS}
    env |= variant
    with log.open("ab") as out:
        proc = subprocess.Popen(list(spec.argv), env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, log, within_s=300)
        yield url, proc.pid
    finally:
        stop(proc)
        shutil.rmtree(home, ignore_errors=True)


async def churn(
    url: str, pid: int, result: VariantResult, folders: list[Path], args: argparse.Namespace
) -> None:
    registered: deque[str] = deque()
    stop = asyncio.Event()
    t0 = time.perf_counter()
    worker = worker_of(pid)
    if worker is None:
        raise RuntimeError("no VLLM::Worker / EngineCore process under the server")

    def sample() -> None:
        result.points.append(
            Point(
                time.perf_counter() - t0,
                result.loads,
                worker.memory_info().rss / MIB,
                heap_mib(worker),
            )
        )

    async def ask(client: httpx.AsyncClient, model: str, max_tokens: int) -> None:
        # Prompt and answer lengths vary, as the soak's trace-driven ones do: batches of many
        # shapes, so the allocator sees the size mix a replica's does.
        words = random.choices(WORDS, k=random.randint(1, args.prompt_words))
        body = {
            "model": model,
            "messages": [{"role": "user", "content": " ".join(words)}],
            "max_tokens": random.randint(1, max_tokens),
        }
        r = await client.post(f"{url}/v1/chat/completions", json=body)
        if r.status_code == 200:
            result.requests += 1
            result.tokens += r.json()["usage"]["completion_tokens"]
        elif r.status_code != 404:  # 404: unregistered between the pick and the call
            result.errors += 1

    async def loader(client: httpx.AsyncClient) -> None:
        i = 0
        if args.traffic_only:  # the control: the same traffic on a fixed set of adapters
            for i, folder in enumerate(folders):
                name = f"fixed-{result.name}-{i}"
                body = {"lora_name": name, "lora_path": str(folder)}
                await client.post(f"{url}/v1/load_lora_adapter", json=body)
                registered.append(name)
            return
        while not stop.is_set():
            name = f"churn-{result.name}-{i}"
            r = await client.post(
                f"{url}/v1/load_lora_adapter",
                json={"lora_name": name, "lora_path": str(folders[i % len(folders)])},
            )
            i += 1
            if r.status_code != 200:
                result.errors += 1
                continue
            result.loads += 1
            registered.append(name)
            await ask(client, name, 4)
            while len(registered) > args.registered:
                old = registered.popleft()
                await client.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": old})

    async def traffic(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            if registered:
                await ask(client, random.choice(list(registered)), args.max_tokens)
            else:
                await asyncio.sleep(0.05)

    async def sampler() -> None:
        while not stop.is_set():
            sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.sample_interval)
        sample()

    async with httpx.AsyncClient(timeout=120) as client:
        tasks = [asyncio.create_task(loader(client)), asyncio.create_task(sampler())]
        tasks += [asyncio.create_task(traffic(client)) for _ in range(args.concurrency)]
        await asyncio.sleep(args.duration)  # the run's length, not a synchronisation
        stop.set()
        await asyncio.gather(*tasks)
    result.seconds = time.perf_counter() - t0


COLUMNS = [
    ("variant", "variant"),
    ("rss_first_mib", "RSS first"),
    ("rss_last_mib", "RSS last"),
    ("rss_mib_per_100_loads", "RSS/100 loads"),
    ("heap_first_mib", "heap first"),
    ("heap_last_mib", "heap last"),
    ("heap_mib_per_100_loads", "heap/100 loads"),
    ("loads", "loads"),
    ("loads_per_s", "loads/s"),
    ("tokens_per_s", "tokens/s"),
    ("errors", "errors"),
]


def result_of(rows: list[dict[str, Any]]) -> Result:
    """The run in the benchmarks' one result format (the summary rows under their headers)."""
    result = Result("engine_heap_churn", [h for _, h in COLUMNS])
    for r in rows:
        result.add(**{h: r[k] for k, h in COLUMNS})
    return result


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[k]) for k, _ in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def write_plot(path: Path, results: list[VariantResult]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rss, ax_heap) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    for r in results:
        loads = [p.loads for p in r.points]
        ax_rss.plot(loads, [p.rss_mib for p in r.points], label=r.name)
        ax_heap.plot(loads, [p.heap_mib for p in r.points], label=r.name)
    ax_rss.set_ylabel("Worker RSS (MiB)")
    ax_rss.set_title("vLLM Worker under LoRA load/unload churn, per allocator setting")
    ax_heap.set_ylabel("Worker [heap] resident (MiB)")
    ax_heap.set_xlabel("adapter loads (fresh names through 2 GPU / 4 RAM slots)")
    for ax in (ax_rss, ax_heap):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="glibc,arena2,fixed,jemalloc")
    parser.add_argument("--duration", type=float, default=150.0, help="churn seconds/variant")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds left out of slopes")
    parser.add_argument("--registered", type=int, default=4, help="adapters registered at once")
    parser.add_argument("--concurrency", type=int, default=4, help="clients besides the loader")
    parser.add_argument("--max-tokens", type=int, default=48, help="answers of 1..N tokens")
    parser.add_argument("--prompt-words", type=int, default=40, help="prompts of 1..N words")
    parser.add_argument(
        "--traffic-only", action="store_true", help="control: no churn, fixed adapters"
    )
    parser.add_argument("--sample-interval", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results/engine_heap_churn.json")
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    if "jemalloc" in names and not JEMALLOC.is_file():
        print(f"skipping jemalloc: {JEMALLOC} is not installed (apt-get install libjemalloc2)")
        names.remove("jemalloc")
    assets = ensure_demo_assets(REPO / ".lorafleet" / "test-cache", DEFAULT_MARKERS)
    folders = [assets.adapters[n] for n in sorted(assets.adapters)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    log = args.out.with_suffix(".vllm.log")
    results = []
    for name in names:
        result = VariantResult(name, VARIANTS[name])
        print(f"[{name}] starting vLLM with {result.env or 'no allocator settings'}", flush=True)
        with started_vllm(VARIANTS[name], assets.base_model, log) as (url, pid):
            asyncio.run(churn(url, pid, result, folders, args))
        results.append(result)
        print(json.dumps(result.summary(args.warmup)), flush=True)
    rows = [r.summary(args.warmup) for r in results]
    if args.plot is not None:
        write_plot(args.plot, results)
    summary = result_of(rows)
    summary.notes.append(
        f"{args.duration:.0f} s of churn per variant (MiB; RSS and heap of vLLM's Worker)"
    )
    summary.details = {
        "rows": rows,
        "points": {r.name: [asdict(p) for p in r.points] for r in results},
    }
    summary.emit(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
