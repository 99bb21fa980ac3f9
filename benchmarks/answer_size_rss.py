"""Peak RSS of the gateway and the agent under concurrent large non-stream answers, before and
after a change, side by side in one run.

Processes, each its own (`python -m lorafleet_gateway`, `python -m lorafleet_agent`, both from
the tree under test): client -> gateway -> agent -> an engine stand-in, a real HTTP server
speaking the parts of vLLM's API the agent uses (`/health`, `/v1/models`, adapter load and
unload) that answers every completion with the same large JSON body (usage last, as vLLM
writes it, with its Content-Length). The agent verifies and registers a real demo adapter
(file://) as it would for vLLM. The client streams each answer and drops it, so only the two
processes under test hold them. Each tree runs alone: a warm-up request, then `--rounds` of
`--concurrency` requests at once; the figure is each process's peak RSS (VmHWM) and its RSS
before the load. "before" is the tree at `--before` (git archive of core, gateway,
replica-image, operator, cli), "after" this checkout.

    .venv/bin/python -m benchmarks.answer_size_rss [--before main] [--answer-mb 10]
        [--concurrency 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.before_after import archive_tree, status_mib, wait_up
from benchmarks.results import Result
from benchmarks.source_roots import pythonpath
from lorafleet_core.api.models import ALL_TARGET_MODULES
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import ensure_demo_assets
from tests.conftest import TEST_CACHE, TEST_MARKERS, TEST_RANKS, free_port
from tests.gateway import manifests as m

ROOT = Path(__file__).resolve().parents[1]
KEY = "lf-bench-answer-0001"
MODEL = "bench/answer:prod"
INTERNAL_TOKEN, DATA_TOKEN = "bench-internal-token", "bench-data-token"


def engine_answer(size: int) -> bytes:
    """A completions answer of about `size` bytes: logprobs first, usage last (vLLM's order)."""
    top = {f"t{i}": -0.5 for i in range(20)}
    per_token = len(json.dumps(top)) + 2
    n = max(size // per_token, 1)
    choice = {"index": 0, "text": "x" * n, "logprobs": {"top_logprobs": [top] * n}}
    usage = {"prompt_tokens": 9, "completion_tokens": n, "total_tokens": 9 + n}
    return json.dumps({"id": "cmpl-bench", "object": "text_completion", "choices": [choice],
                       "usage": usage}).encode()  # fmt: skip


def engine_app(size: int) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    body = engine_answer(size)
    registered: set[str] = set()

    async def health(_: Request) -> Response:
        return Response(b"")

    async def models(_: Request) -> Response:
        data = [{"id": "base", "parent": None}] + [{"id": n, "parent": "base"} for n in registered]
        return JSONResponse({"data": data})

    async def load(request: Request) -> Response:
        registered.add((await request.json())["lora_name"])
        return Response(b"ok")

    async def unload(request: Request) -> Response:
        registered.discard((await request.json())["lora_name"])
        return Response(b"ok")

    async def complete(request: Request) -> Response:
        await request.body()
        return Response(body, media_type="application/json")

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/models", models),
            Route("/v1/load_lora_adapter", load, methods=["POST"]),
            Route("/v1/unload_lora_adapter", unload, methods=["POST"]),
            Route("/v1/completions", complete, methods=["POST"]),
        ]
    )


@dataclass
class Tree:
    label: str
    root: Path


@dataclass
class Figures:
    label: str
    gateway_before_mib: float
    gateway_peak_mib: float
    agent_before_mib: float
    agent_peak_mib: float
    answers: int
    failed: int
    answer_bytes: int
    seconds: float


async def _ask(client: httpx.AsyncClient, url: str) -> int:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 16}
    headers = {"authorization": f"Bearer {KEY}"}
    size = 0
    async with client.stream("POST", url, json=body, headers=headers, timeout=300) as resp:
        if resp.status_code != 200:  # counted as failed (the servers' log says why)
            print(f"{resp.status_code}: {(await resp.aread())[:200]!r}", file=sys.stderr)
            return -1
        async for chunk in resp.aiter_raw():
            size += len(chunk)  # dropped: the client holds nothing
    return size


def _start(command: list[str], env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, stderr=log)


def _env(tree: Tree) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": pythonpath(tree.root)}


async def run_tree(tree: Tree, args: argparse.Namespace, tmp: Path, log: Any) -> Figures:
    assets = ensure_demo_assets(TEST_CACHE, TEST_MARKERS, lambda *_: None, ranks=TEST_RANKS)
    record = AdapterRecord(
        id=f"bench-answer-{tree.label}",
        tenant="bench",
        base_model_hash=assets.base_model_hash,
        rank=assets.ranks["zebra"],
        alpha=float(2 * assets.ranks["zebra"]),
        target_modules=tuple(sorted(ALL_TARGET_MODULES)),
        weights_uri=assets.adapters["zebra"].resolve().as_uri(),
        checksum=assets.checksums["zebra"],
    )
    engine_port, data, internal, gw_port, gw_int = (free_port() for _ in range(5))
    env = _env(tree)
    folder = tmp / tree.label / "manifests"
    m.write_fleet(folder, "bench", KEY, [record], {MODEL: record.id}, requests_per_second=1000,
                  tokens_per_minute=10**9)  # fmt: skip
    rows = [{"id": "r0", "dataUrl": f"http://127.0.0.1:{data}",
             "internalUrl": f"http://127.0.0.1:{internal}"}]  # fmt: skip
    m.write(folder, "replicas.yaml", [{"replicas": rows}])
    size = int(args.answer_mb * 2**20)
    agent_env = {
        **env,
        "LORAFLEET_AGENT_REPLICA_ID": "r0",
        "LORAFLEET_AGENT_BASE_MODEL_HASH": assets.base_model_hash,
        "LORAFLEET_AGENT_BASE_MODEL_DIR": str(assets.base_model),
        "LORAFLEET_AGENT_MAX_RANK": "64",
        "LORAFLEET_AGENT_VLLM_URL": f"http://127.0.0.1:{engine_port}",
        "LORAFLEET_AGENT_CACHE_DIR": str(tmp / tree.label / "cache"),
        "LORAFLEET_AGENT_HOST": "127.0.0.1",
        "LORAFLEET_AGENT_DATA_PORT": str(data),
        "LORAFLEET_AGENT_INTERNAL_PORT": str(internal),
        "LORAFLEET_AGENT_INTERNAL_TOKEN": INTERNAL_TOKEN,
        "LORAFLEET_AGENT_DATA_TOKEN": DATA_TOKEN,
    }
    gw_env = {
        **env,
        "LORAFLEET_GATEWAY_HOST": "127.0.0.1",
        "LORAFLEET_GATEWAY_PORT": str(gw_port),
        "LORAFLEET_GATEWAY_INTERNAL_PORT": str(gw_int),
        "LORAFLEET_GATEWAY_MANIFESTS_DIR": str(folder),
        "LORAFLEET_GATEWAY_REPLICA_TOKEN": INTERNAL_TOKEN,
        "LORAFLEET_GATEWAY_REPLICA_DATA_TOKEN": DATA_TOKEN,
    }
    py = sys.executable
    engine_code = (
        "import sys, uvicorn; from benchmarks.answer_size_rss import engine_app; "
        f"uvicorn.run(engine_app({size}), host='127.0.0.1', port={engine_port}, "
        "log_level='warning', access_log=False)"
    )
    engine_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), str(ROOT)])}
    procs = [_start([py, "-c", engine_code], engine_env, log)]
    try:
        await wait_up(f"http://127.0.0.1:{engine_port}/health")
        procs.append(_start([py, "-m", "lorafleet_agent"], agent_env, log))
        await wait_up(f"http://127.0.0.1:{internal}/readyz")
        procs.append(_start([py, "-m", "lorafleet_gateway"], gw_env, log))
        await wait_up(f"http://127.0.0.1:{gw_int}/readyz")
        gateway_pid, agent_pid = procs[2].pid, procs[1].pid
        url = f"http://127.0.0.1:{gw_port}/v1/completions"
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(limits=limits) as client:
            answer_bytes = await _ask(client, url)  # warm-up: the on-demand load, imports
            gw_before, agent_before = (
                status_mib(gateway_pid, "VmRSS"),
                status_mib(agent_pid, "VmRSS"),
            )
            started = time.monotonic()
            answers = failed = 0
            for _ in range(args.rounds):
                sizes = await asyncio.gather(*(_ask(client, url) for _ in range(args.concurrency)))
                answers += sum(1 for s in sizes if s == answer_bytes)
                failed += sum(1 for s in sizes if s != answer_bytes)
            seconds = time.monotonic() - started
        return Figures(
            tree.label,
            gw_before,
            status_mib(gateway_pid, "VmHWM"),
            agent_before,
            status_mib(agent_pid, "VmHWM"),
            answers,
            failed,
            answer_bytes,
            seconds,
        )
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def report(rows: list[Figures], args: argparse.Namespace) -> None:
    columns = ["tree", "gateway RSS idle MiB", "gateway peak MiB", "agent RSS idle MiB",
               "agent peak MiB", "answers/s", "failed"]  # fmt: skip
    result = Result("answer_size_rss", columns)
    result.notes.append(
        f"{args.concurrency} concurrent non-stream answers of "
        f"{rows[0].answer_bytes / 2**20:.1f} MiB, {args.rounds} rounds (gateway -> agent -> "
        "engine stand-in, each its own process); peak = VmHWM"
    )
    for r in rows:
        result.add(
            tree=r.label,
            failed=r.failed,
            **{
                "gateway RSS idle MiB": round(r.gateway_before_mib),
                "gateway peak MiB": round(r.gateway_peak_mib),
                "agent RSS idle MiB": round(r.agent_before_mib),
                "agent peak MiB": round(r.agent_peak_mib),
                "answers/s": round(r.answers / r.seconds, 1),
            },
        )
    result.emit(args.out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git ref of the 'before' tree")
    parser.add_argument("--answer-mb", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--log", type=Path, default=Path("answer_size_rss.log"),
                        help="the servers' stderr")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="answer-rss-") as name:
        tmp = Path(name)
        before = archive_tree(args.before, tmp / "before-tree")
        trees = [Tree(f"before ({args.before})", before), Tree("after (this checkout)", ROOT)]
        rows = []
        with args.log.open("wb") as log:
            for tree in trees:
                tree_label = tree.label.split(" ")[0]
                rows.append(asyncio.run(run_tree(Tree(tree_label, tree.root), args, tmp, log)))
                rows[-1].label = tree.label
        report(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
