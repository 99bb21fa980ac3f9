"""The agent's one Kubernetes client (its pod's ServiceAccount), made on first use.

Only a cluster agent has one: it asks the API server to review the tokens its callers send
(TokenReview) and posts Events (a record conflict). It is created lazily inside the agent's
event loop (aiohttp sessions belong to a loop) and configured the one lorafleet way
(lorafleet_core.kube.client): an explicit API server in tests, else the in-cluster account.
A failure to configure surfaces to the caller at the moment of use: TokenReview then fails
closed, an Event is dropped with a log line.
"""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client

from lorafleet_core.kube.client import load_configuration


class AgentKube:
    def __init__(self, api_server: str | None) -> None:
        self._api_server = api_server
        self._api: client.ApiClient | None = None
        self._lock = asyncio.Lock()

    async def api(self) -> client.ApiClient:
        async with self._lock:
            if self._api is None:
                cfg = await load_configuration(api_server=self._api_server)
                self._api = client.ApiClient(cfg)
            return self._api

    async def aclose(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None
