"""One vLLM server process of a benchmark: wait until it answers `/health`, then stop it.

Benchmarks that start vLLM with the standalone command line
(`lorafleet_standalone.processes.vllm_process`) and talk to it directly share these two
steps; `lorafleet up` has its own supervisor.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx


def wait_healthy(
    proc: subprocess.Popen[Any],
    url: str,
    log: Path | str,
    *,
    within_s: float | None = None,
    poll_s: float = 1.0,
) -> None:
    """Return once `url/health` answers 200; raise if vLLM exits first or `within_s` passes."""
    deadline = None if within_s is None else time.monotonic() + within_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.returncode}; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        if deadline is not None and time.monotonic() > deadline:
            raise RuntimeError(f"vLLM not healthy in {within_s:g} s; see {log}")
        time.sleep(poll_s)  # polling a starting server, not synchronising a test


def stop(proc: subprocess.Popen[Any], grace_s: float = 30.0) -> None:
    """SIGTERM (vLLM shuts its engine process down), SIGKILL after `grace_s`."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
