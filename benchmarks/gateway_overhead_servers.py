"""The stand-in servers of benchmarks/gateway_overhead.py, each run as its own process: a fast
upstream (streams a few SSE chunks, answers /state) and a bare pass-through hop (httpx
streaming, no logic), under uvicorn with the gateway's settings.

    python benchmarks/gateway_overhead_servers.py upstream --port PORT
    python benchmarks/gateway_overhead_servers.py hop --port PORT --upstream URL
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

CHUNKS = 6


def upstream_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    from lorafleet_core.wire.agent_api import STATE_ROUTE
    from lorafleet_core.wire.headers import HEADER_ADAPTER_ID, HEADER_ADAPTER_TIER

    async def chat(request: Request) -> Response:
        body = await request.json()
        model = body["model"]

        async def gen() -> AsyncIterator[bytes]:
            for i in range(CHUNKS):
                data = {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "delta": {"content": f"t{i} "}}],
                }
                yield b"data: " + json.dumps(data).encode() + b"\n\n"
            usage = {"prompt_tokens": 5, "completion_tokens": CHUNKS, "total_tokens": 5 + CHUNKS}
            final = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            yield b"data: " + json.dumps(final).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        headers = {HEADER_ADAPTER_TIER: "gpu", HEADER_ADAPTER_ID: model}
        return StreamingResponse(gen(), media_type="text/event-stream", headers=headers)

    async def state(request: Request) -> Response:
        rid = request.path_params["replica_id"]
        return JSONResponse({"replica_id": rid, "gpu_adapters": [], "timestamp": time.time()})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route(STATE_ROUTE, state),
        ]
    )


def hop_app(upstream: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    client = httpx.AsyncClient(
        base_url=upstream, timeout=60, limits=httpx.Limits(max_keepalive_connections=512)
    )

    async def chat(request: Request) -> Response:
        req = client.build_request(
            "POST",
            "/v1/chat/completions",
            content=await request.body(),
            headers={"content-type": "application/json"},
        )
        resp = await client.send(req, stream=True)

        async def gen() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()

        return StreamingResponse(
            gen(), status_code=resp.status_code, media_type="text/event-stream"
        )

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def serve(role: str, port: int, upstream: str) -> None:
    import uvicorn

    app = upstream_app() if role == "upstream" else hop_app(upstream)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["upstream", "hop"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", default="")
    args = parser.parse_args()
    serve(args.role, args.port, args.upstream)


if __name__ == "__main__":
    main()
