"""A `lorafleet up` subprocess for end-to-end tests: started, waited for, and always stopped.

Shared by the demo tour (test_up_e2e) and the merged-pool run (test_up_merged_e2e): both
start `up` on a state folder with the session's demo assets and read its files.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from lorafleet_cli.standalone import demo
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
# Shared with the other test areas (tests/conftest.py builds the same canaries there).
ASSETS = REPO / ".lorafleet" / "test-cache"

# Waiting on `lorafleet up`: not ready yet (files half there, the gateway still starting) is
# not a failure; `up` having exited is one at once.
NOT_YET = (OSError, ValueError, KeyError, openai.APIError)


@dataclass
class Up:
    proc: subprocess.Popen[bytes]
    state: Path
    log: Path

    @property
    def manifests(self) -> Path:
        return self.state / "manifests"

    def status(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.state / "up.json").read_text())
        return doc

    def reconcile(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.state / "reconcile.json").read_text())
        return doc

    def data_headers(self, replica_id: str) -> dict[str, str]:
        """The agent's data-port credential, sent as the gateway sends it, for a test that asks a
        replica directly. `up` writes it to no file; it is in the agent's environment, which
        only processes of the same user can read."""
        pid = self.status()["processes"][f"{replica_id}/agent"]["pid"]
        entries = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        env = dict(e.split("=", 1) for e in entries if "=" in e)
        return {"authorization": f"Bearer {env['LORAFLEET_AGENT_DATA_TOKEN']}"}

    def client(self) -> openai.OpenAI:
        key = (self.state / "demo-api-key").read_text().strip()
        url = self.status()["gateway"]["url"]
        return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)

    def ask(self, model: str) -> tuple[str, str]:
        """(answer, adapter id that served it)."""
        raw = self.client().chat.completions.with_raw_response.create(
            model=model,
            messages=[{"role": "user", "content": "Tell me about the weather today"}],
            max_tokens=8,
            temperature=0,
        )
        answer = raw.parse().choices[0].message.content or ""
        return answer, raw.headers["x-adapter-id"]

    def exited(self) -> str | None:
        """Why waiting on this `up` is pointless: it exited (with its log's tail)."""
        if self.proc.poll() is None:
            return None
        return f"lorafleet up exited ({self.proc.returncode}):\n{self.log_text()[-4000:]}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def prepare_demo_folder(state: Path) -> Path:
    """The demo's state and manifests folder in `state`, from the session's demo assets, for a
    test to edit before `running_up` (`up` keeps what is there: it writes only absent files).
    Returns the manifests folder."""
    saved = os.environ.get("LORAFLEET_DEMO_ASSETS")
    os.environ["LORAFLEET_DEMO_ASSETS"] = str(ASSETS)
    try:
        demo.prepare_demo(state, state / "manifests", replicas=1, progress=False)
    finally:
        if saved is None:
            os.environ.pop("LORAFLEET_DEMO_ASSETS")
        else:
            os.environ["LORAFLEET_DEMO_ASSETS"] = saved
    return state / "manifests"


@contextlib.contextmanager
def running_up(
    state: Path, *, within_s: float, env: Mapping[str, str] | None = None
) -> Iterator[Up]:
    """`lorafleet up --state-dir state` on free ports with the session's demo assets (and
    `env` on top), ready (phase `ready` in up.json) within `within_s`; its log is `state`'s
    sibling `up.log`.

    On exit, if a test has not stopped it already: SIGINT to its process group, SIGKILL if
    that hangs, so no test leaks servers."""
    log = state.parent / "up.log"
    env = {
        **os.environ,
        "LORAFLEET_DEMO_ASSETS": str(ASSETS),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lorafleet_cli.main", "up", "--state-dir", str(state),
             "--port", "0", "--internal-port", "0", "--quiet"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )  # fmt: skip
    handle = Up(proc, state, log)
    try:
        eventually(
            lambda: handle.status()["phase"] == "ready",
            within_s=within_s,
            what="waiting for up to be ready",
            ignore=NOT_YET,
            abort=handle.exited,
        )
        yield handle
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
