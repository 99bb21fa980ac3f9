"""Talking to replicas: open a completion on the first candidate that answers.

Before the first byte of the answer nothing has reached the client, so a connection error, a
dropped connection or a replica-side error answer (503, `engine_unavailable`, ...; the whole
table is in replica_errors) moves on to the next candidate (the router's retry order). One
candidate is one `try_replica` step: send; on a 404 `adapter_not_registered` (the replica has
no record of the adapter yet) post the record from the catalog to the replica's internal load
endpoint, then send once more carrying the tier the load found the adapter in
(`HEADER_LOADED_FROM`), so that request, and only that request, reports it. After the first
byte the choice is final (lorafleet_gateway.relay takes over). For a non-stream answer the
"first byte" is its first `answer_buffer_bytes`: an answer up to that is held whole, so a
replica failing inside it is still retried; a longer one is relayed as it arrives
(relay.AnswerRelay), so a gateway holds at most that much of any answer.

Every data request carries the gateway's token estimate (`HEADER_TOKENS_ESTIMATE`), which the
agent counts as the request's tokens in flight, and the agents' data credential (`data_token`,
lorafleet_agent.data_auth); the client's own Authorization header never goes upstream. With
tracing on (lorafleet_core.web.tracing) each candidate is an `upstream attempt` span, and the
request to the agent carries its `traceparent`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from lorafleet_core.web import request_ids, tracing
from lorafleet_core.wire.error_codes import ErrorCode
from lorafleet_core.wire.headers import (
    HEADER_ADAPTER_TIER,
    HEADER_LOADED_FROM,
    HEADER_REQUEST_ID,
    HEADER_TOKENS_ESTIMATE,
)
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_core.wire.replica_client import post_load
from lorafleet_core.wire.tiers import Tier, parse_tier
from lorafleet_gateway.catalog import ReplicaEndpoint
from lorafleet_gateway.errors import APIError
from lorafleet_gateway.replica_errors import (
    error_code,
    judge,
    no_candidate_answered,
    read_and_drop,
)
from lorafleet_gateway.replica_poller import ReplicaTracker
from lorafleet_gateway.reservation import Reservation
from lorafleet_gateway.validation import CompletionRequest

log = logging.getLogger(__name__)
_tracer = trace.get_tracer("lorafleet_gateway")

PATHS = {
    "chat": "/v1/chat/completions",
    "completion": "/v1/completions",
    "responses": "/v1/responses",
}
_RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)


@dataclass(slots=True)
class Opened:
    """An upstream answer whose first bytes have arrived (or a full non-stream body).

    With `chunks` (a stream, or a non-stream answer longer than the gateway holds) `response`
    stays open until the caller closes it.
    """

    replica_id: str
    status: int
    tier: str
    response: httpx.Response
    first: bytes  # the first body chunk (stream), the whole body, or its first part
    first_at: float  # perf_counter when `first` arrived
    headers_at: float  # perf_counter when the status and headers arrived (before `first`)
    chunks: AsyncIterator[bytes] | None = None  # the rest of a stream
    attempts: int = 1  # replicas tried, this one included
    loaded_on_demand: bool = False


class TryNext(Exception):
    """This candidate failed before the first byte: try the next one.

    `code` is the replica's reason when it gave one (`store_unavailable`, ...), so the answer
    after the last candidate can say what they all said.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class _NotRegistered(Exception):
    """The replica answered 404 adapter_not_registered."""


def upstream_body(req: CompletionRequest, adapter_id: str) -> bytes:
    """The body sent to the replica: the model becomes the immutable adapter id.

    A chat or completions stream always asks for usage on every chunk (continuous usage
    stats), so a stream cut anywhere is billed by the engine's own count of what the client
    was handed; the relay (relay.UsageFilter) takes out what the client did not ask for. (A
    Responses stream always ends with its usage.) A Responses request is never stored on the
    replica: the next request may go to another one (validation refuses what would need it).
    """
    body = dict(req.body)
    body["model"] = adapter_id
    if req.kind == "responses":
        body["store"] = False
    elif req.stream:
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True
        options["continuous_usage_stats"] = True
        body["stream_options"] = options
    return json.dumps(body).encode()


class Upstream:
    def __init__(
        self,
        client: httpx.AsyncClient,
        tracker: ReplicaTracker,
        *,
        max_attempts: int = 3,
        answer_buffer_bytes: int = 256 * 1024,
        on_outcome: Callable[[str], None] = lambda _o: None,
        replica_token: str | Callable[[], str | None] | None = None,
        data_token: str | Callable[[], str | None] | None = None,
    ) -> None:
        self.client = client
        # A callable is read per load: a projected ServiceAccount token rotates under us.
        self._token = replica_token if callable(replica_token) else (lambda: replica_token)
        # Read per request too: a mounted Secret is re-read when it rotates.
        self._data_token = data_token if callable(data_token) else (lambda: data_token)
        self.tracker = tracker
        self.max_attempts = max_attempts
        self.answer_buffer_bytes = answer_buffer_bytes
        self.on_outcome = on_outcome

    async def open(
        self,
        req: CompletionRequest,
        record: AdapterRecord,
        candidates: tuple[str, ...],
        held: Reservation,
        no_load: frozenset[str] = frozenset(),
    ) -> Opened:
        """`try_replica` on the candidates in order until one answers.

        `no_load` are replicas never sent an on-demand load (merged replicas: their weights
        already are the adapter, they have no LoRA slots): one that does not know the adapter
        is skipped. Raises APIError 503 when none answered, 504 on a read timeout, 502 when a
        replica refused the adapter's files.
        """
        content = upstream_body(req, record.id)
        tried = 0
        last_error = "no healthy replica"
        codes: list[str | None] = []  # each tried candidate's reason
        for replica_id in candidates[: self.max_attempts]:
            ep = self.tracker.endpoint(replica_id)
            if ep is None:
                continue
            if tried:
                self.on_outcome("retry")
            tried += 1
            try:
                # One span per attempt, to the answer's first byte; the agent's request span
                # is its child (try_replica sends its traceparent).
                with tracing.span(
                    _tracer,
                    "upstream attempt",
                    kind=SpanKind.CLIENT,
                    attributes={"lorafleet.replica_id": replica_id, "lorafleet.attempt": tried},
                ):
                    opened = await self.try_replica(
                        ep, req, record, content, held, load=replica_id not in no_load
                    )
            except TryNext as exc:
                last_error = str(exc)
                codes.append(exc.code)
                continue
            opened.attempts = tried
            return opened
        log.warning("no replica answered for %s: %s", record.id, last_error)
        raise no_candidate_answered(codes)

    async def try_replica(
        self,
        ep: ReplicaEndpoint,
        req: CompletionRequest,
        record: AdapterRecord,
        content: bytes,
        held: Reservation,
        *,
        load: bool = True,
    ) -> Opened:
        """One candidate: send, and after a 404 adapter_not_registered load it and send again
        (unless `load` is False: then the next candidate)."""
        held.place(ep.id)
        headers = {"content-type": "application/json", HEADER_TOKENS_ESTIMATE: str(held.tokens)}
        if (data_token := self._data_token()) is not None:
            headers["authorization"] = f"Bearer {data_token}"
        request_id = request_ids.current.get()
        if request_id is not None:  # the agent's and vLLM's log lines carry the same id
            headers[HEADER_REQUEST_ID] = request_id
        tracing.inject(headers)  # the agent's span joins the request's trace
        try:
            return await self._send(ep, req, content, headers)
        except _NotRegistered:
            if not load:
                raise TryNext(f"{ep.id} does not serve {record.id}") from None
        headers[HEADER_LOADED_FROM] = await self._load(ep, record)
        self.on_outcome("load_on_demand")
        try:
            opened = await self._send(ep, req, content, headers)
        except _NotRegistered:
            raise TryNext(f"{ep.id} did not register the adapter") from None
        opened.loaded_on_demand = True
        return opened

    async def _load(self, ep: ReplicaEndpoint, record: AdapterRecord) -> str:
        """Post the record to the replica's load endpoint; returns the tier it was found in."""
        try:
            resp = await post_load(
                self.client, ep.internal_url, ep.id, record, gpu=False, token=self._token()
            )
        except httpx.HTTPError as exc:
            raise TryNext(f"load on {ep.id} failed: {exc!r}") from exc
        if resp.status_code == 422:
            # The replica verified the files and refused them: no replica will do better.
            log.error("replica %s rejected adapter %s: %s", ep.id, record.id, resp.text[:500])
            raise APIError(
                502,
                "The model's adapter could not be loaded; the operator has been notified.",
                code=ErrorCode.ADAPTER_REJECTED,
            )
        if resp.status_code >= 400:
            code = error_code(resp.content)
            raise TryNext(f"load on {ep.id} answered {resp.status_code} {code or ''}", code=code)
        try:
            found = parse_tier(resp.json().get("from"))
        except (ValueError, AttributeError):
            found = None
        # An agent that does not say where it found the adapter fetched it, at worst remotely.
        return str(found or Tier.REMOTE)

    async def _send(
        self, ep: ReplicaEndpoint, req: CompletionRequest, content: bytes, headers: dict[str, str]
    ) -> Opened:
        request = self.client.build_request(
            "POST", ep.data_url + PATHS[req.kind], content=content, headers=headers
        )
        try:
            response = await self.client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            self.tracker.mark_failed(ep.id)
            raise TryNext(f"{ep.id}: {exc!r}") from exc
        except _RETRYABLE as exc:
            raise TryNext(f"{ep.id}: {exc!r}") from exc
        except httpx.TimeoutException:
            raise self._timed_out(ep.id) from None
        headers_at = time.perf_counter()
        try:
            return await self._first_bytes(ep.id, response, req.stream, headers_at)
        except BaseException:
            await response.aclose()
            raise

    async def _first_bytes(
        self, replica_id: str, response: httpx.Response, stream: bool, headers_at: float
    ) -> Opened:
        try:
            if response.status_code != 200:  # see replica_errors for what each answer means
                verdict = judge(response.status_code, await read_and_drop(response))
                if verdict.not_registered:
                    raise _NotRegistered
                if verdict.retry:
                    raise TryNext(f"{replica_id}: {verdict.reason}", code=verdict.code)
                assert verdict.error is not None
                if response.status_code == 401:  # a deployment error, not the client's
                    log.error(
                        "replica %s refused the gateway's data credential: check "
                        "LORAFLEET_GATEWAY_REPLICA_DATA_TOKEN(_FILE) against its DATA_TOKEN",
                        replica_id,
                    )
                raise verdict.error
            chunks: AsyncIterator[bytes] | None = None
            if stream:
                chunks = response.aiter_raw()
                first = b""
                while not first:  # an empty read is not the first byte
                    first = await anext(chunks)
            else:
                first, chunks = await _held_part(response.aiter_raw(), self.answer_buffer_bytes)
                if chunks is None:
                    await response.aclose()
        except StopAsyncIteration:
            raise TryNext(f"{replica_id}: closed before the first byte") from None
        except _RETRYABLE as exc:
            raise TryNext(f"{replica_id}: {exc!r}") from exc
        except httpx.TimeoutException:
            raise self._timed_out(replica_id) from None
        return Opened(
            replica_id=replica_id,
            status=response.status_code,
            tier=response.headers.get(HEADER_ADAPTER_TIER, "unknown"),
            response=response,
            first=first,
            first_at=time.perf_counter(),
            headers_at=headers_at,
            chunks=chunks,
        )

    @staticmethod
    def _timed_out(replica_id: str) -> APIError:
        # The replica took the request but produced nothing in read_timeout_s: retrying
        # elsewhere would double the work on an overloaded fleet.
        log.warning("replica %s timed out before the first byte", replica_id)
        return APIError(504, "The replica did not answer in time.", code="upstream_timeout")


async def _held_part(
    chunks: AsyncIterator[bytes], limit: int
) -> tuple[bytes, AsyncIterator[bytes] | None]:
    """A non-stream answer read up to `limit` bytes: (the whole body, None), or (its first
    part, the rest still to come) when it is longer."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(parts), chunks
    return b"".join(parts), None
