"""An agent in a background thread of the test process, on the session's vLLM.

The agent is the shipped `lorafleet_agent.server.Agent`, serving both ports on loopback with
its own event loop; tests and benchmarks talk to it over HTTP as the gateway would.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from lorafleet_agent.server import Agent
from lorafleet_agent.settings import AgentSettings


@dataclass
class RunningAgent:
    agent: Agent
    thread: threading.Thread

    @property
    def data_url(self) -> str:
        return f"http://127.0.0.1:{self.agent.data_port}"

    @property
    def internal_url(self) -> str:
        return f"http://127.0.0.1:{self.agent.internal_port}"


@contextlib.contextmanager
def agent_in_thread(
    settings: AgentSettings, timeout_s: float = 60.0, *, wait_ready: bool = True
) -> Iterator[RunningAgent]:
    """Run an agent in a background thread with its own event loop.

    `wait_ready=False` returns once the ports serve, before vLLM answers (the agent then
    refuses completions and loads with 503 until it does; auth and probes already work)."""
    agent = Agent(settings)
    started = threading.Event()
    errors: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(agent.serve(started))
        except BaseException as exc:  # surfaced to the caller below
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=main, name=f"agent-{settings.replica_id}", daemon=True)
    thread.start()
    if not started.wait(timeout_s) or errors or not agent.serving:
        agent.stop()
        thread.join(10)
        raise RuntimeError(f"agent did not start: {errors[:1]}")
    if wait_ready and not agent.ready.wait(timeout_s):
        agent.stop()
        thread.join(10)
        raise RuntimeError("agent did not become ready (is vLLM up?)")
    try:
        yield RunningAgent(agent, thread)
    finally:
        agent.stop()
        thread.join(30)
