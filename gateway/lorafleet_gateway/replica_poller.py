"""Replica state: polled from every replica each interval, plus the gateway's own in-flight count.

Between polls the gateway adds the tokens of requests it started since the last poll and
subtracts those that finished, so a burst does not pile onto the replica that looked idlest a
second ago. A replica is healthy while its last poll succeeded and is at most two intervals old:
one that stops answering leaves the candidate set within two poll intervals (a refused
connection or an error answer removes it at the next poll; a hung or slow one when its last
answer ages out). A replica
the request path failed to connect to is also held out until its next successful poll, and
one whose state says `engine_ready: false` (its vLLM dead or hung) until it says true. Only
when every replica has aged out (the gateway itself stalled) are the last good answers used.
A replica whose state says `warming` (its first pre-warm pass has not ended) is left out while
another healthy replica can serve, so a new replica's first requests do not fetch from the
object store what its pre-warm is loading; when every replica is warming (a whole pool
starting) they all serve.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from lorafleet_core.wire.replica_client import StateUnavailable, fetch_state
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_gateway.catalog import ReplicaEndpoint
from lorafleet_gateway.router import ReplicaView, blended_tokens

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Entry:
    endpoint: ReplicaEndpoint
    state: ReplicaState | None = None
    gpu: frozenset[str] = field(default_factory=frozenset)
    last_ok: float = float("-inf")
    ok: bool = False
    local_tokens: int = 0  # tokens of this gateway's requests in flight on the replica now
    local_at_poll: int = 0  # local_tokens when the last state was taken


class ReplicaTracker:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.interval_s = interval_s
        self.clock = clock
        self._entries: dict[str, _Entry] = {}

    # -- membership -------------------------------------------------------------------------
    def set_endpoints(self, endpoints: Sequence[ReplicaEndpoint]) -> None:
        wanted = {e.id: e for e in endpoints}
        for rid in list(self._entries):
            if rid not in wanted:
                del self._entries[rid]
        for rid, ep in wanted.items():
            entry = self._entries.get(rid)
            if entry is None or entry.endpoint != ep:
                self._entries[rid] = _Entry(ep)

    def endpoint(self, replica_id: str) -> ReplicaEndpoint | None:
        entry = self._entries.get(replica_id)
        return entry.endpoint if entry else None

    # -- polling ----------------------------------------------------------------------------
    async def _poll(self, entry: _Entry) -> None:
        ep = entry.endpoint
        at_send = entry.local_tokens
        try:
            state = await fetch_state(self.client, ep.internal_url, ep.id)
        except StateUnavailable as exc:
            if exc.timed_out:
                # Slow, not necessarily gone (a busy event loop, a GC pause): keep the last
                # state until it ages out, which happens two intervals after the last answer.
                log.info("replica %s state poll timed out: %s", ep.id, exc)
                return
            # Refused connection or a broken answer: out of the candidate set right away.
            if entry.ok:
                log.warning("replica %s state poll failed: %s", ep.id, exc)
            entry.ok = False
            return
        if not state.engine_ready:
            # The agent answers, its vLLM does not (dead, restarting or hung): the agent would
            # answer every request 503, and its idle look would draw them all there first.
            if entry.ok:
                log.warning("replica %s: its engine is down; routing elsewhere", ep.id)
            entry.ok = False
            return
        entry.state = state
        entry.gpu = frozenset(state.gpu_adapters)
        entry.local_at_poll = at_send
        entry.last_ok = self.clock()
        entry.ok = True

    async def poll_once(self) -> None:
        await asyncio.gather(*(self._poll(e) for e in list(self._entries.values())))

    async def run(self, endpoints: Callable[[], Sequence[ReplicaEndpoint]]) -> None:
        """Poll every interval until cancelled; `endpoints` is read again before each round."""
        while True:
            started = self.clock()
            self.set_endpoints(endpoints())
            await self.poll_once()
            await asyncio.sleep(max(0.0, self.interval_s - (self.clock() - started)))

    # -- the request path -------------------------------------------------------------------
    def healthy(self, entry: _Entry, now: float) -> bool:
        return entry.ok and now - entry.last_ok <= 2 * self.interval_s

    def healthy_ids(self) -> list[str]:
        now = self.clock()
        return [rid for rid, e in self._entries.items() if self.healthy(e, now)]

    def views(self) -> dict[str, ReplicaView]:
        """Healthy replicas and their load: polled tokens in flight adjusted by local changes.

        When no replica is healthy only because every last answer aged out, while each last
        poll itself succeeded, the cause is usually this gateway (a stalled event loop, a CPU
        starved pod) rather than every replica at once; those replicas stay candidates
        instead of answering 503 to everyone. A replica the request path then cannot reach is
        marked failed and retried elsewhere, as always.
        """
        now = self.clock()
        entries = [(rid, e) for rid, e in self._entries.items() if e.state is not None]
        chosen = [(rid, e) for rid, e in entries if self.healthy(e, now)]
        if not chosen:
            chosen = [(rid, e) for rid, e in entries if e.ok]
        warm = [(rid, e) for rid, e in chosen if e.state is not None and not e.state.warming]
        chosen = warm or chosen
        out: dict[str, ReplicaView] = {}
        for rid, e in chosen:
            assert e.state is not None
            tokens = blended_tokens(e.state.tokens_in_flight, e.local_tokens, e.local_at_poll)
            out[rid] = ReplicaView(tokens, e.state.queue_depth, e.gpu, merged=e.state.merged)
        return out

    # Called only by lorafleet_gateway.reservation.Reservation, which pairs them.
    def begin(self, replica_id: str, tokens: int) -> None:
        entry = self._entries.get(replica_id)
        if entry is not None:
            entry.local_tokens += tokens

    def end(self, replica_id: str, tokens: int) -> None:
        entry = self._entries.get(replica_id)
        if entry is not None:
            entry.local_tokens = max(0, entry.local_tokens - tokens)

    def local_tokens(self) -> dict[str, int]:
        """Tokens of this gateway's requests in flight, per replica (metrics and tests read it)."""
        return {rid: e.local_tokens for rid, e in self._entries.items()}

    def mark_failed(self, replica_id: str) -> None:
        """The request path could not reach it: hold it out until a poll succeeds again."""
        entry = self._entries.get(replica_id)
        if entry is not None:
            entry.ok = False
