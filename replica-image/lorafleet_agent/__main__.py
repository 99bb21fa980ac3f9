"""`python -m lorafleet_agent`: serve the replica agent with settings from the environment."""

from __future__ import annotations

import asyncio
import logging

from lorafleet_agent.server import Agent
from lorafleet_agent.settings import AgentSettings
from lorafleet_core.web import request_ids


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    for handler in logging.getLogger().handlers:  # lines name the request they belong to
        request_ids.install(handler, "%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(Agent(AgentSettings()).serve())


if __name__ == "__main__":
    main()
