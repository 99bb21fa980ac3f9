"""`python -m lorafleet_agent`: serve the replica agent with settings from the environment."""

from __future__ import annotations

import asyncio
import logging

from lorafleet_agent.server import Agent
from lorafleet_agent.settings import AgentSettings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(Agent(AgentSettings()).serve())


if __name__ == "__main__":
    main()
