"""`python -m lorafleet_agent`: serve the replica agent with settings from the environment."""

from __future__ import annotations

import asyncio

from lorafleet_agent.server import Agent
from lorafleet_agent.settings import AgentSettings
from lorafleet_core import logs
from lorafleet_core.web import tracing


def main() -> None:
    logs.configure("INFO")  # first: a setting that fails to parse is a line of the log too
    settings = AgentSettings()
    logs.configure("INFO", replica=settings.replica_id)  # every line names its replica
    tracing.setup("lorafleet-agent")  # only with an OTLP endpoint in the OTEL_* variables
    asyncio.run(Agent(settings).serve())


if __name__ == "__main__":
    main()
