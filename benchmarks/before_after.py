"""Shared parts of the benchmarks that measure this checkout against an older one (`--before`).

The older tree is `git archive REF` of this repository, extracted where the benchmark says; its
processes run from its sources (source_roots.pythonpath). Memory is read from /proc: VmRSS
(now) and VmHWM (the peak since the process started), which is what a pod's memory limit meets.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def archive_tree(ref: str, dest: Path) -> Path:
    """The tree of `ref` extracted into `dest` (created); `dest` is returned."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", ref], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def status_mib(pid: int, field: str) -> float:
    """A memory field of /proc/PID/status (VmRSS, VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for {pid}")


async def wait_up(url: str, within_s: float = 90) -> None:
    """Return once `url` answers 200: a started process is ready to be measured."""
    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get(url, timeout=2)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)  # polling a process's start, not synchronising a test
    raise RuntimeError(f"{url} did not come up")
