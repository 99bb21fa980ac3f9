"""Talking to replicas: open a completion on the first candidate that answers, then relay it.

Before the first byte of the answer nothing has reached the client, so a connection error, a
503 or a dropped connection moves on to the next candidate (the router's retry order). A 404
`adapter_not_registered` means the replica has no record of the adapter yet: the gateway posts
the record from its catalog to the replica's internal load endpoint and retries that replica
once. After the first byte the choice is final; a failure ends the stream with an SSE error
event the official client raises as an APIError.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from lorafleet_core.names import HEADER_ADAPTER_TIER
from lorafleet_core.records import AdapterRecord
from lorafleet_gateway.errors import APIError
from lorafleet_gateway.replica_poller import ReplicaTracker
from lorafleet_gateway.validation import CompletionRequest

log = logging.getLogger("lorafleet.gateway.upstream")

PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
_RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)


@dataclass(slots=True)
class Opened:
    """An upstream answer whose first bytes have arrived (or a full non-stream body)."""

    replica_id: str
    status: int
    tier: str
    response: httpx.Response
    first: bytes  # the first body chunk (stream) or the whole body
    first_at: float  # perf_counter when `first` arrived
    attempts: int
    chunks: AsyncIterator[bytes] | None = None
    loaded_on_demand: bool = False


def upstream_body(req: CompletionRequest, adapter_id: str) -> bytes:
    """The body sent to the replica: the model becomes the immutable adapter id.

    Streams always ask for usage so the rate limiter can reconcile with real token counts;
    the usage event is stripped again when the client did not ask for it.
    """
    body = dict(req.body)
    body["model"] = adapter_id
    if req.stream:
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True
        body["stream_options"] = options
    return json.dumps(body).encode()


async def _error_code(resp: httpx.Response) -> str | None:
    try:
        data = json.loads(await resp.aread())
        return str(data["error"]["code"])
    except (ValueError, KeyError, TypeError, httpx.HTTPError):
        return None


class Upstream:
    def __init__(
        self,
        client: httpx.AsyncClient,
        tracker: ReplicaTracker,
        *,
        max_attempts: int = 3,
        on_outcome: Callable[[str], None] = lambda _o: None,
    ) -> None:
        self.client = client
        self.tracker = tracker
        self.max_attempts = max_attempts
        self.on_outcome = on_outcome

    async def _load(self, internal_url: str, replica_id: str, record: AdapterRecord) -> None:
        url = f"{internal_url}/internal/replicas/{replica_id}/adapters/{record.id}/load"
        # for_request: the retried request then reports the tier the adapter was found in.
        payload = {"record": record.model_dump(mode="json"), "gpu": False, "for_request": True}
        try:
            resp = await self.client.post(url, json=payload)
        except httpx.HTTPError as exc:
            raise _Retry(f"load on {replica_id} failed: {exc!r}") from exc
        if resp.status_code == 422:
            # The replica verified the files and refused them: no replica will do better.
            log.error("replica %s rejected adapter %s: %s", replica_id, record.id, resp.text)
            raise APIError(
                502,
                "The model's adapter could not be loaded; the operator has been notified.",
                code="adapter_rejected",
            )
        if resp.status_code >= 400:
            raise _Retry(f"load on {replica_id} answered {resp.status_code}")

    async def open(
        self,
        req: CompletionRequest,
        record: AdapterRecord,
        candidates: tuple[str, ...],
        tokens: int,
    ) -> Opened:
        """Send to candidates in order until one answers.

        For a stream the caller owns `opened.response` and must close it (relay_stream does).
        Raises APIError 503 when no candidate answered, 504 on a read timeout, 502 when a
        replica refused the adapter's files.
        """
        content = upstream_body(req, record.id)
        headers = {"content-type": "application/json"}
        path = PATHS[req.kind]
        attempts = 0
        loaded = False
        last_error = "no healthy replica"
        for replica_id in candidates[: self.max_attempts]:
            ep = self.tracker.endpoint(replica_id)
            if ep is None:
                continue
            tries_here = 2  # a second try only after an on-demand load
            loaded_here = False
            while tries_here:
                tries_here -= 1
                attempts += 1
                if attempts > 1:
                    self.on_outcome("retry")
                self.tracker.begin(replica_id, tokens)
                try:
                    opened = await self._attempt(ep.data_url, path, content, headers, req.stream)
                except _NotRegistered:
                    self.tracker.end(replica_id, tokens)
                    if loaded_here or not tries_here:
                        last_error = f"{replica_id} did not register the adapter"
                        break
                    try:
                        await self._load(ep.internal_url, replica_id, record)
                    except _Retry as exc:
                        last_error = str(exc)
                        break
                    loaded = loaded_here = True
                    self.on_outcome("load_on_demand")
                    continue
                except (_Retry, *_RETRYABLE) as exc:
                    self.tracker.end(replica_id, tokens)
                    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                        self.tracker.mark_failed(replica_id)
                    last_error = f"{replica_id}: {exc!r}"
                    break
                except httpx.TimeoutException as exc:
                    # The replica took the request but produced nothing in read_timeout_s:
                    # retrying elsewhere would double the work on an overloaded fleet.
                    self.tracker.end(replica_id, tokens)
                    log.warning("replica %s timed out before the first byte: %r", replica_id, exc)
                    raise APIError(
                        504, "The replica did not answer in time.", code="upstream_timeout"
                    ) from None
                except BaseException:
                    self.tracker.end(replica_id, tokens)
                    raise
                response, first, first_at, chunks = opened
                return Opened(
                    replica_id=replica_id,
                    status=response.status_code,
                    tier=response.headers.get(HEADER_ADAPTER_TIER, "unknown"),
                    response=response,
                    first=first,
                    first_at=first_at,
                    attempts=attempts,
                    chunks=chunks,
                    loaded_on_demand=loaded,
                )
        log.warning("no replica answered for %s: %s", record.id, last_error)
        raise APIError(
            503,
            "No replica is available to serve this model right now. Please retry.",
            code="upstream_unavailable",
        )

    async def _attempt(
        self, data_url: str, path: str, content: bytes, headers: dict[str, str], stream: bool
    ) -> tuple[httpx.Response, bytes, float, AsyncIterator[bytes] | None]:
        request = self.client.build_request(
            "POST", data_url + path, content=content, headers=headers
        )
        response = await self.client.send(request, stream=True)
        try:
            if response.status_code == 503:
                raise _Retry("503")
            if response.status_code == 404 and await _error_code(response) == (
                "adapter_not_registered"
            ):
                raise _NotRegistered
            if stream and response.status_code == 200:
                chunks = response.aiter_raw()
                first = b""
                while not first:  # an empty read is not the first byte
                    first = await anext(chunks)
                return response, first, time.perf_counter(), chunks
            body = await response.aread()
            await response.aclose()
            return response, body, time.perf_counter(), None
        except StopAsyncIteration:
            await response.aclose()
            raise _Retry("closed before the first byte") from None
        except BaseException:
            await response.aclose()
            raise


class _Retry(Exception):
    """This candidate failed before the first byte: try the next."""


class _NotRegistered(Exception):
    """The replica answered 404 adapter_not_registered."""


def parse_usage(event: bytes) -> dict[str, Any] | None:
    """The `usage` object of an SSE data event, when it carries one."""
    if b'"usage":{' not in event and b'"usage": {' not in event:
        return None
    try:
        data = json.loads(event[event.index(b"{") :])
    except ValueError:
        return None
    usage = data.get("usage") if isinstance(data, dict) else None
    return usage if isinstance(usage, dict) else None
