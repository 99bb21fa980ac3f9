"""The few vLLM endpoints the agent calls, over HTTP on localhost.

vLLM runs with an API key only the agent holds (`--api-key`, given as `VLLM_API_KEY`): every
`/v1/*` call carries it, so no other process in the pod or on the node can register adapters
or send completions behind the agent's back. `/health` is open (vLLM guards only `/v1`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from lorafleet_core.web import request_ids, tracing


class VllmError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"vLLM answered {status}: {message}")
        self.status = status


def is_unknown_model(status: int, body: bytes) -> bool:
    """vLLM's answer for a model name it has not registered (e.g. after it restarted)."""
    return status == 404 and b"does not exist" in body


class VllmClient:
    def __init__(self, base_url: str, timeout_s: float, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        # Answers are passed on byte for byte (data_app): none may come compressed.
        headers = {"accept-encoding": "identity"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        # No pool limit: every in-flight completion holds one connection for its whole stream.
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _post(self, path: str, body: dict[str, str]) -> httpx.Response:
        try:
            return await self.http.post(path, json=body)
        except httpx.HTTPError as exc:  # vLLM down or restarting: the caller may go elsewhere
            raise VllmError(503, f"vLLM unreachable: {exc!r}") from exc

    async def load_lora(self, name: str, path: Path) -> None:
        r = await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        # Same name already registered (e.g. a retry after a timeout): it is loaded, fine.
        if r.status_code == 400 and "already been loaded" in r.text:
            return
        if r.status_code != 200:
            raise VllmError(r.status_code, r.text[:500])

    async def unload_lora(self, name: str) -> None:
        r = await self._post("/v1/unload_lora_adapter", {"lora_name": name})
        if r.status_code not in (200, 404):  # 404: not registered, which is what we want
            raise VllmError(r.status_code, r.text[:500])

    async def lora_names(self) -> list[str]:
        """Adapters registered with vLLM (the /v1/models cards that have a parent)."""
        r = await self.http.get("/v1/models", timeout=5.0)
        r.raise_for_status()
        data: list[dict[str, Any]] = r.json().get("data", [])
        return [str(m["id"]) for m in data if m.get("parent")]

    async def health(self) -> str:
        """ "ok"; "down" when refused or not 200 (no engine); "slow" when it timed out (an
        engine busy on a 2-core machine can miss a deadline and still be alive)."""
        try:
            r = await self.http.get("/health", timeout=2.0)
        except httpx.TimeoutException:
            return "slow"
        except httpx.HTTPError:
            return "down"
        return "ok" if r.status_code == 200 else "down"

    async def healthy(self) -> bool:
        try:
            r = await self.http.get("/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    async def engine_metrics(self) -> bytes | None:
        """vLLM's /metrics (Prometheus text); None when the engine does not answer in time, so
        a scrape during a restart still returns the agent's own series."""
        try:
            r = await self.http.get("/metrics", timeout=2.0)
        except httpx.HTTPError:
            return None
        return r.content if r.status_code == 200 else None

    async def send_completion(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """Open a completion (streamed read); the caller closes the response.

        Carries the request's id (lorafleet_core.web.request_ids) as `X-Request-Id`, which vLLM
        takes as its own request id: its log lines and the completion's `id` name it. And the
        current span's `traceparent` (lorafleet_core.web.tracing), which a vLLM started with
        `--otlp-traces-endpoint` continues."""
        request_id = request_ids.current.get()
        headers = {"X-Request-Id": request_id} if request_id else {}
        tracing.inject(headers)
        request = self.http.build_request("POST", path, json=body, headers=headers)
        return await self.http.send(request, stream=True)
