"""The few vLLM endpoints the agent calls, over HTTP on localhost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx


class VllmError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"vLLM answered {status}: {message}")
        self.status = status


class VllmClient:
    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        # No pool limit: every in-flight completion holds one connection for its whole stream.
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def load_lora(self, name: str, path: Path) -> None:
        r = await self.http.post(
            "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)}
        )
        # Same name already registered (e.g. a retry after a timeout): it is loaded, fine.
        if r.status_code == 400 and "already been loaded" in r.text:
            return
        if r.status_code != 200:
            raise VllmError(r.status_code, r.text[:500])

    async def unload_lora(self, name: str) -> None:
        r = await self.http.post("/v1/unload_lora_adapter", json={"lora_name": name})
        if r.status_code not in (200, 404):  # 404: not registered, which is what we want
            raise VllmError(r.status_code, r.text[:500])

    async def lora_names(self) -> list[str]:
        """Adapters registered with vLLM (the /v1/models cards that have a parent)."""
        r = await self.http.get("/v1/models")
        r.raise_for_status()
        data: list[dict[str, Any]] = r.json().get("data", [])
        return [str(m["id"]) for m in data if m.get("parent")]

    async def healthy(self) -> bool:
        try:
            r = await self.http.get("/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return r.status_code == 200
