"""`python -m lorafleet_agent` as a process writes only lines of the shared JSON log format."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.log_lines import json_lines

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(90)
def test_an_agent_whose_engine_never_comes_logs_json_lines_with_the_traceback(tmp_path: Path):
    """The agent starts, serves its ports and gives up on a vLLM that never answers: every line
    (its own, uvicorn's, asyncio's) is one JSON object naming the replica, and the failure's
    traceback is one `exception` field, not lines of its own."""
    env = {
        **os.environ,
        "LORAFLEET_AGENT_REPLICA_ID": "logs-r0",
        "LORAFLEET_AGENT_HOST": "127.0.0.1",
        "LORAFLEET_AGENT_DATA_PORT": str(free_port()),
        "LORAFLEET_AGENT_INTERNAL_PORT": str(free_port()),
        "LORAFLEET_AGENT_VLLM_URL": f"http://127.0.0.1:{free_port()}",  # nobody listens
        "LORAFLEET_AGENT_VLLM_START_TIMEOUT_S": "1",
        "LORAFLEET_AGENT_CACHE_DIR": str(tmp_path / "cache"),
        "LORAFLEET_AGENT_INTERNAL_TOKEN": "internal-secret-token",
        "LORAFLEET_AGENT_DATA_TOKEN": "data-secret-token",
    }
    env.pop("LORAFLEET_LOG_FORMAT", None)  # the default
    done = subprocess.run(
        [sys.executable, "-m", "lorafleet_agent"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    lines = json_lines(done.stdout + done.stderr)
    assert all(line["replica"] == "logs-r0" for line in lines), lines
    (failed,) = [x for x in lines if x["message"] == "agent could not take over vLLM; stopping"]
    assert failed["level"] == "ERROR"
    assert failed["exception"].startswith("Traceback")
    assert "RuntimeError: vLLM at" in failed["exception"].splitlines()[-1]
    assert any(x["logger"].startswith("lorafleet_agent") and x["level"] == "INFO" for x in lines)
    assert "secret-token" not in done.stdout + done.stderr
