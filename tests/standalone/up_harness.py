"""A `lorafleet up` subprocess for end-to-end tests: started, waited for, and always stopped.

Shared by the demo tour (test_up_e2e), the tool-call checks (test_up_demo_tool_calls) and
the merged-pool runs (test_up_merged_e2e, test_up_auto_merge_e2e): each starts `up` on a state
folder with the session's demo assets and reads its files. The demo tour and the tool-call
checks share one `up` (`SharedDemoUp`, a session fixture): one vLLM start less per run. Their
file names sort next to each other (test_up_demo_tool_calls, then test_up_e2e, which stops it),
so the shared `up` is not left idle, holding its engine's ~3 GB, while other modules run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from lorafleet_standalone import demo
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

    def ask_stream(self, model: str) -> str:
        """The answer to `ask`'s question, streamed."""
        stream = self.client().chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Tell me about the weather today"}],
            max_tokens=8,
            temperature=0,
            stream=True,
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    def burst(self, model: str, n: int) -> list[int]:
        """`n` one-token requests sent at once: their statuses (a burst over the tenant's
        requests per second is partly refused, 429)."""
        key = (self.state / "demo-api-key").read_text().strip()
        url = self.status()["gateway"]["url"] + "/v1/chat/completions"
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}

        async def send_all() -> list[int]:
            headers = {"authorization": f"Bearer {key}"}
            limits = httpx.Limits(max_connections=n)
            async with httpx.AsyncClient(headers=headers, limits=limits, timeout=60) as http:
                answers = await asyncio.gather(*(http.post(url, json=body) for _ in range(n)))
            return [a.status_code for a in answers]

        return asyncio.run(send_all())

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


# The demo pool of the shared `up` serves tool calls: a parser that needs no special tokens
# (the demo tokenizer has none), and no JSON whitespace in vLLM's grammar: the tiny model pads
# constrained JSON with whitespace until max_tokens (measured: `required` then parses no call).
# Neither changes an answer without tools, which is all the demo tour asks for.
TOOL_CALL_PARSER = "pythonic"
TOOL_ENGINE_ARGS = [
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
]


def tool_calling_demo_folder(state: Path) -> None:
    """The demo folder in `state`, its pool's engine set up for tool calls."""
    path = prepare_demo_folder(state) / f"replicapool-{demo.DEMO_POOL}.yaml"
    pool = yaml.safe_load(path.read_text())
    pool["spec"]["engine"]["toolCallParser"] = TOOL_CALL_PARSER
    pool["spec"]["engine"]["extraArgs"] = TOOL_ENGINE_ARGS
    path.write_text(yaml.safe_dump(pool))


class SharedDemoUp:
    """One demo `lorafleet up` (1 replica, tool calls on) for every module that asks for it.

    `get()` hands out the running one; once a test has stopped it (the demo tour ends with
    Ctrl-C) or it died, the next `get()` starts a fresh one on a fresh state folder, so a module
    never depends on which module ran before it. Modules that restart processes check their
    restart counts within the module, where the `up` is the same."""

    def __init__(self, new_state: Callable[[], Path], exits: contextlib.ExitStack) -> None:
        self._new_state = new_state
        self._exits = exits
        self._up: Up | None = None

    def get(self) -> Up:
        if self._up is None or self._up.proc.poll() is not None:
            state = self._new_state()
            tool_calling_demo_folder(state)
            self._up = self._exits.enter_context(running_up(state, within_s=480))
        return self._up
