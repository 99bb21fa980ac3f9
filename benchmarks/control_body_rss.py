"""Peak RSS of the control API process under unauthenticated large POSTs, before and after a
change, side by side in one run.

Each tree's control API runs as `lorafleet up` starts it (`python -m lorafleet_operator.control`
over a manifests folder, lorafleet_standalone.processes.control_process) with its own
PYTHONPATH. Then `--posts` clients at once each POST `--body-mb` MB to /internal/adapters
without a credential, streamed from memory the client does not hold; the figure is the
process's RSS before (VmRSS) and its peak (VmHWM), and what each client was answered. "before"
is the tree at `--before` (benchmarks.before_after), "after" this checkout.

    .venv/bin/python -m benchmarks.control_body_rss [--before main] [--body-mb 100] [--posts 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.before_after import archive_tree, status_mib, wait_up
from benchmarks.results import Result
from benchmarks.source_roots import pythonpath
from lorafleet_operator.control.auth import token_sha256
from lorafleet_standalone import processes
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
PIECE = b"x" * 65536


@dataclass
class Figures:
    label: str
    idle_mib: float
    peak_mib: float
    answers: list[str]


async def _body(total: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        piece = PIECE[: total - sent]
        yield piece
        sent += len(piece)


async def _post(url: str, total: int) -> str:
    headers = {"content-type": "application/json", "content-length": str(total)}
    try:
        async with httpx.AsyncClient(timeout=300) as client:
            resp = await client.post(url, content=_body(total), headers=headers)
        return str(resp.status_code)
    except httpx.HTTPError as exc:  # refused mid-body: the server closed while we still sent
        return type(exc).__name__


async def run_tree(label: str, root: Path, args: argparse.Namespace, tmp: Path) -> Figures:
    folder = tmp / f"manifests-{label}"
    folder.mkdir()
    port = free_port()
    spec = processes.control_process(
        manifests_dir=folder,
        replicas_file=folder / "replicas.yaml",
        port=port,
        token_sha256=token_sha256("bench-admin-token"),
        log_dir=tmp,
    )
    env = {**os.environ, **spec.env, "PYTHONPATH": pythonpath(root)}
    proc = subprocess.Popen(list(spec.argv), env=env, stdout=subprocess.DEVNULL)  # noqa: ASYNC220
    try:
        assert spec.health_url is not None
        await wait_up(spec.health_url)
        idle = status_mib(proc.pid, "VmRSS")
        total = int(args.body_mb * 1_000_000)
        url = f"http://127.0.0.1:{port}/internal/adapters"
        answers = await asyncio.gather(*(_post(url, total) for _ in range(args.posts)))
        return Figures(label, idle, status_mib(proc.pid, "VmHWM"), list(answers))
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git ref of the 'before' tree")
    parser.add_argument("--body-mb", type=float, default=100.0)
    parser.add_argument("--posts", type=int, default=1, help="concurrent unauthenticated POSTs")
    parser.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="control-rss-") as name:
        tmp = Path(name)
        before = archive_tree(args.before, tmp / "before-tree")
        rows = [
            asyncio.run(run_tree("before", before, args, tmp)),
            asyncio.run(run_tree("after", ROOT, args, tmp)),
        ]
    result = Result("control_body_rss", ["tree", "RSS idle MiB", "peak RSS MiB", "answers"])
    result.notes.append(
        f"{args.posts} concurrent unauthenticated POST(s) of {args.body_mb:g} MB to "
        f"/internal/adapters; before = {args.before}, after = this checkout; peak = VmHWM"
    )
    for r in rows:
        result.add(
            tree=r.label,
            answers=" ".join(r.answers),
            **{"RSS idle MiB": round(r.idle_mib), "peak RSS MiB": round(r.peak_mib)},
        )
    result.emit(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
