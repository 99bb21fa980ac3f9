"""A stand-in replica: a real HTTP server speaking the agent's data + internal contract.

It is a test double for the *replica* (agent + vLLM), not for the gateway: it streams OpenAI
SSE chunks, answers /state, accepts records on the load endpoint, refuses unknown adapters with
404 `adapter_not_registered`, and can be told to fail, delay, die mid-stream or stop answering
its state poll. Replies carry `[<replica>|<adapter>]` so tests see where a request went.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from lorafleet_core.wire.openai_errors import error_body
from lorafleet_core.wire.records import AdapterRecord


class FakeReplica:
    def __init__(self, replica_id: str, *, registered: tuple[str, ...] = ()) -> None:
        self.replica_id = replica_id
        self.registered: set[str] = set(registered)
        self.gpu: set[str] = set()
        self.loads: list[AdapterRecord] = []
        self.load_headers: list[dict[str, str]] = []  # of load and unload calls
        self.unloads: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        # knobs a test may turn
        self.fail_status: int | None = None
        self.fail_code: str | None = None  # the OpenAI `code` of the failure answer
        self.fail_message = "replica told to fail"
        self.fail_text: str | None = None  # answer the failure as text/plain instead
        self.raw_stream: list[bytes] | None = None  # a stream's exact bytes (malformed SSE)
        self.first_byte_delay = 0.0
        self.chunk_delay = 0.0
        self.end_delay = 0.0  # between `data: [DONE]` and the end of the response
        self.die_after_chunks: int | None = None
        self.stall_after_chunks: int | None = None  # then send nothing more (until cancelled)
        # After the first chunk, a stream waits until the test sets this (then ends normally).
        self.hold_streams: threading.Event | None = None
        self.state_mode = "ok"  # ok | hang | error
        self.tokens_in_flight = 0
        self.queue_depth = 0
        self.warming = False  # reported as the agent does until its first pre-warm pass ends
        self.engine_ready = True  # false as the agent reports while its vLLM is down or hung
        self.reject_loads = False
        self.n_tokens = 4
        # A non-stream answer padded by this many bytes before its usage, sent in 64 KiB
        # pieces (with its Content-Length); hold_streams / die_after_chunks apply to them.
        self.answer_pad = 0
        self.split_crlf = False  # CRLF line ends, every event written in two pieces cut in one
        self.state_polls = 0
        self.merged: dict[str, str] | None = None  # /state `merged` (a merged pool's replica)
        # adapter -> the adapter whose answer it gives (a replica holding the wrong weights)
        self.answer_as: dict[str, str] = {}

    def _text(self, adapter: str) -> list[str]:
        adapter = self.answer_as.get(adapter, adapter)
        return [f"[{self.replica_id}|{adapter}]"] + [f" tok{i}" for i in range(self.n_tokens - 1)]

    def _tier(self, adapter: str, loaded_from: str | None) -> str:
        # As the agent: the slower of where the on-demand load found it and where it is now.
        tier = "gpu" if adapter in self.gpu else "disk"
        self.gpu.add(adapter)
        return loaded_from if loaded_from in ("disk", "remote") else tier

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await self._complete(request, chat=True)

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            return await self._complete(request, chat=False)

        @app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            return await self._respond(request)

        @app.get("/internal/replicas/{rid}/state")
        async def state(rid: str) -> Response:
            self.state_polls += 1
            if self.state_mode == "hang":
                await asyncio.sleep(3600)
            if self.state_mode == "error" or rid != self.replica_id:
                return JSONResponse(error_body(500, "state unavailable"), status_code=500)
            return JSONResponse(
                {
                    "replica_id": self.replica_id,
                    "gpu_adapters": sorted(self.gpu),
                    "disk_adapters": sorted(self.registered - self.gpu),
                    "queue_depth": self.queue_depth,
                    "tokens_in_flight": self.tokens_in_flight,
                    "warming": self.warming,
                    "engine_ready": self.engine_ready,
                    "timestamp": time.time(),
                    "merged": self.merged,
                }
            )

        @app.post("/internal/replicas/{rid}/adapters/{aid}/load")
        async def load(rid: str, aid: str, request: Request) -> Response:
            self.load_headers.append(dict(request.headers))
            payload = await request.json()
            record = AdapterRecord.model_validate(payload["record"])
            if self.reject_loads or record.id != aid:
                body = error_body(422, "checksum mismatch", code="adapter_rejected")
                return JSONResponse(body, status_code=422)
            self.loads.append(record)
            found = "disk" if aid in self.registered else "remote"
            self.registered.add(aid)
            return JSONResponse({"adapter_id": aid, "tier": "ram", "from": found})

        @app.post("/internal/replicas/{rid}/adapters/{aid}/unload")
        async def unload(rid: str, aid: str, request: Request) -> Response:
            self.load_headers.append(dict(request.headers))
            self.unloads.append(aid)
            self.registered.discard(aid)
            self.gpu.discard(aid)
            return JSONResponse({"adapter_id": aid, "tier": "remote"})

        return app

    async def _complete(self, request: Request, *, chat: bool) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        adapter = body["model"]
        if self.fail_status is not None:
            if self.fail_text is not None:
                return Response(self.fail_text, self.fail_status, media_type="text/plain")
            return JSONResponse(
                error_body(self.fail_status, self.fail_message, code=self.fail_code),
                status_code=self.fail_status,
            )
        if adapter not in self.registered:
            return JSONResponse(
                error_body(404, f"adapter {adapter} not registered", code="adapter_not_registered"),
                status_code=404,
            )
        headers = {
            "x-adapter-id": adapter,
            "x-adapter-tier": self._tier(adapter, request.headers.get("x-lorafleet-loaded-from")),
            "x-replica-id": self.replica_id,
        }
        pieces = self._text(adapter)
        n = int(body.get("n") or 1)  # choices: each generates the same pieces
        usage = {
            "prompt_tokens": 7,
            "completion_tokens": n * len(pieces),
            "total_tokens": 7 + n * len(pieces),
        }
        created = int(time.time())
        if not body.get("stream"):
            await asyncio.sleep(self.first_byte_delay)
            text = "".join(pieces)
            if chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
            obj = "chat.completion" if chat else "text_completion"
            out = {
                "id": "cmpl-1",
                "object": obj,
                "created": created,
                "model": adapter,
                "choices": [{**choice, "index": k} for k in range(n)],
                "usage": usage,
            }
            if self.answer_pad:
                del out["usage"]  # then written after the padding, as vLLM writes it last
                out["pad"] = "x" * self.answer_pad
                out["usage"] = usage
                raw = json.dumps(out).encode()
                headers["content-length"] = str(len(raw))
                return StreamingResponse(
                    self._pieces(raw), media_type="application/json", headers=headers
                )
            return JSONResponse(out, headers=headers)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if self.raw_stream is not None:
            return StreamingResponse(
                _chunks(self.raw_stream), media_type="text/event-stream", headers=headers
            )
        return StreamingResponse(
            self._sse(adapter, pieces, usage, include_usage, chat, created, n),
            media_type="text/event-stream",
            headers=headers,
        )

    async def _pieces(self, raw: bytes) -> AsyncIterator[bytes]:
        pieces = [raw[i : i + 65536] for i in range(0, len(raw), 65536)]
        for i, piece in enumerate(pieces):
            if self.die_after_chunks is not None and i >= self.die_after_chunks:
                raise RuntimeError("replica died inside its answer")  # the connection drops
            yield piece
            if self.hold_streams is not None and i == 0:
                await asyncio.to_thread(self.hold_streams.wait)

    async def _respond(self, request: Request) -> Response:
        """The Responses API, as vLLM answers it: named events, usage in the last one."""
        body = await request.json()
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        adapter = body["model"]
        if adapter not in self.registered:
            return JSONResponse(
                error_body(404, f"adapter {adapter} not registered", code="adapter_not_registered"),
                status_code=404,
            )
        headers = {"x-adapter-id": adapter, "x-adapter-tier": self._tier(adapter, None)}
        pieces = self._text(adapter)
        usage = {"input_tokens": 7, "output_tokens": len(pieces), "total_tokens": 7 + len(pieces)}
        message = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "".join(pieces), "annotations": []}],
        }
        done = {
            "id": "resp_1",
            "object": "response",
            "created_at": int(time.time()),
            "model": adapter,
            "status": "completed",
            "output": [message],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }
        if not body.get("stream"):
            return JSONResponse(done, headers=headers)
        if self.raw_stream is not None:
            return StreamingResponse(
                _chunks(self.raw_stream), media_type="text/event-stream", headers=headers
            )

        def event(kind: str, **data: Any) -> bytes:
            payload = json.dumps({"type": kind, **data}, separators=(",", ":"))
            return f"event: {kind}\ndata: {payload}\n\n".encode()

        created = {**done, "status": "in_progress", "output": [], "usage": None}
        events = [event("response.created", response=created, sequence_number=0)]
        for i, piece in enumerate(pieces):
            events.append(
                event(
                    "response.output_text.delta",
                    item_id="msg_1",
                    output_index=0,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                    sequence_number=i + 1,
                )
            )
        events.append(event("response.completed", response=done, sequence_number=len(pieces) + 1))
        return StreamingResponse(_chunks(events), media_type="text/event-stream", headers=headers)

    async def _sse(
        self,
        adapter: str,
        pieces: list[str],
        usage: dict[str, int],
        include_usage: bool,
        chat: bool,
        created: int,
        n: int = 1,
    ) -> AsyncIterator[bytes]:
        obj = "chat.completion.chunk" if chat else "text_completion"

        def event(choice: dict[str, Any] | None, with_usage: bool = False) -> bytes:
            data: dict[str, Any] = {
                "id": "cmpl-1",
                "object": obj,
                "created": created,
                "model": adapter,
                "choices": [choice] if choice else [],
            }
            if include_usage:
                data["usage"] = usage if with_usage else None
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        async def send(raw: bytes) -> AsyncIterator[bytes]:
            if not self.split_crlf:
                yield raw
                return
            raw = raw.replace(b"\n", b"\r\n")
            cut = len(raw) - 1  # between the last CR and LF
            yield raw[:cut]
            await asyncio.sleep(0.02)  # lets the first piece go out as a read of its own
            yield raw[cut:]

        def choice(
            text: str, finish: str | None = None, role: bool = False, index: int = 0
        ) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"content": text}
                if role:
                    delta["role"] = "assistant"
                return {"index": index, "delta": delta, "finish_reason": finish}
            return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}

        await asyncio.sleep(self.first_byte_delay)
        for i, piece in enumerate(pieces):
            if self.die_after_chunks is not None and i >= self.die_after_chunks:
                raise RuntimeError("replica died mid-stream")  # uvicorn drops the connection
            if self.stall_after_chunks is not None and i >= self.stall_after_chunks:
                await asyncio.Event().wait()  # a slow engine; ends when the gateway hangs up
            for k in range(n):
                async for piece_bytes in send(event(choice(piece, role=i == 0, index=k))):
                    yield piece_bytes
            if self.hold_streams is not None and i == 0:
                await asyncio.to_thread(self.hold_streams.wait)
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
        for raw in (
            *(event(choice("", "stop", index=k)) for k in range(n)),
            *([event(None, with_usage=True)] if include_usage else []),
            b"data: [DONE]\n\n",
        ):
            async for piece_bytes in send(raw):
                yield piece_bytes
        if self.end_delay:
            await asyncio.sleep(self.end_delay)  # a busy replica finishing its response late


async def _chunks(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece
