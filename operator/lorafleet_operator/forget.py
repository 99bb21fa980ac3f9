"""A deleted LoRAAdapter reaches the replicas: each ready one is told to forget it.

An agent holds the registry record of every adapter it loaded and refuses a second, different
record under that id (ids are immutable; vLLM cannot swap weights under a live name). Without
this, a LoRAAdapter deleted and recreated under its name with other weights would be refused
by every replica that still held the old record until it restarted. The deletion
handler (handlers.adapters) calls `forget_everywhere` after the adapter left the placement;
what did not forget yet keeps the finalizer, for a bounded time (`GiveUpClock`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx

from lorafleet_core.api.models import ReplicaPool
from lorafleet_core.planning.adapters import shared_pools
from lorafleet_core.wire.error_codes import ErrorCode
from lorafleet_core.wire.replica_client import post_forget
from lorafleet_operator.fleet_index import Endpoint, FleetIndex

log = logging.getLogger(__name__)

# A forget drops a record, a registration and a folder: quick when the agent answers at all.
FORGET_TIMEOUT = httpx.Timeout(10.0, connect=3.0)


def replicas_to_tell(index: FleetIndex, adapter: str) -> list[Endpoint]:
    """The ready replicas that may hold the adapter: those of every shared pool serving its base
    model (any of them may have loaded it on demand). A pod not ready or being deleted is
    skipped: it serves nothing, and a restarted agent holds no record."""
    entry = index.adapters.get(adapter)
    base = entry.adapter.spec.base_model_hash if entry and entry.adapter else None
    pools: Iterable[ReplicaPool] = shared_pools(list(index.pools.values()))
    names = [p.metadata.name for p in pools if base is None or p.spec.base_model.hash == base]
    return [e for pool in names for e in index.pool_endpoints(pool) if e.ip]


async def forget_everywhere(
    endpoints: list[Endpoint], adapter: str, token: str | None
) -> dict[str, str]:
    """Tell each replica to forget the adapter, all at once; returns those that did not, with
    why (busy with requests, unreachable, an error). A 404 is done: the pod now serves another
    replica id, or its agent predates forget (it then behaves as before)."""
    async with httpx.AsyncClient(timeout=FORGET_TIMEOUT) as http:

        async def one(ep: Endpoint) -> str | None:
            base = f"http://{ep.ip}:{ep.port}"
            try:
                resp = await post_forget(http, base, ep.replica_id, adapter, token=token)
            except httpx.HTTPError as exc:
                return f"unreachable ({type(exc).__name__})"
            if resp.status_code in (200, 404):
                return None
            code = _error_code(resp)
            if code == ErrorCode.ADAPTER_BUSY:
                return "requests are running on it"
            return f"answered {resp.status_code} {code or ''}".rstrip()

        answers = await asyncio.gather(*(one(ep) for ep in endpoints))
    return {ep.replica_id: why for ep, why in zip(endpoints, answers, strict=True) if why}


def forget_incomplete_message(adapter: str, left: dict[str, str], waited_s: float) -> str:
    """What a deletion that gave up on `left` (replica id -> why it did not forget) says: who,
    and what those replicas do until they restart."""
    who = ", ".join(f"{r} ({why})" for r, why in sorted(left.items()))
    return (
        f"LoRAAdapter {adapter} deleted after waiting {waited_s:.0f}s while replicas had not "
        f"forgotten it: {who}. Until they restart they keep its record and refuse a LoRAAdapter "
        f"recreated under this name with other weights (RecordConflict); restart them to clear it"
    )


def _error_code(resp: httpx.Response) -> str | None:
    try:
        code = resp.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return str(code) if code is not None else None


@dataclass
class GiveUpClock:
    """Since when each deletion has had replicas that did not forget, so a replica that stays
    busy or unreachable (a node gone, its pod not yet marked) holds a deletion for `limit_s`
    at most. In memory: an operator restart starts the wait again, which only delays."""

    limit_s: float
    clock: Callable[[], float] = time.monotonic
    _since: dict[tuple[str, str], float] = field(default_factory=dict)

    def expired(self, key: tuple[str, str]) -> bool:
        """Note a failed try; whether the deletion has waited long enough."""
        now = self.clock()
        return now - self._since.setdefault(key, now) >= self.limit_s

    def done(self, key: tuple[str, str]) -> None:
        self._since.pop(key, None)
