"""The one client of a replica's `GET /internal/replicas/{id}/state`
(lorafleet_core.wire.replica_state).

Its readers (the gateway's poller, the operator's autoscaler, `lorafleet status`, the standalone
runner) pass their own httpx client (connection pool, timeouts, credentials are theirs) and get
a validated `ReplicaState` or one exception, `StateUnavailable`, that says whether the replica
was merely slow (`timed_out`: it may still be there) or answered badly or not at all.
"""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from lorafleet_core.wire.replica_state import ReplicaState


class StateUnavailable(Exception):
    """The replica gave no usable state: no answer, an error status, or not a ReplicaState."""

    def __init__(self, url: str, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.timed_out = timed_out


def state_url(internal_url: str, replica_id: str) -> str:
    """Where a replica serves its state, from its internal base URL (`http://host:port`)."""
    return f"{internal_url.rstrip('/')}/internal/replicas/{replica_id}/state"


def _parse(url: str, resp: httpx.Response) -> ReplicaState:
    if resp.status_code != 200:
        raise StateUnavailable(url, f"answered {resp.status_code}")
    try:
        return ReplicaState.model_validate_json(resp.content)
    except ValidationError as exc:
        raise StateUnavailable(url, f"not a replica state: {exc.error_count()} errors") from exc


# A GET is safe to repeat. A pooled keep-alive connection the replica's server closed just as
# the request went out (a poll interval close to uvicorn's 5 s keep-alive) fails with
# "server disconnected without sending a response": one retry on a fresh connection.
_STALE_CONNECTION = httpx.RemoteProtocolError


def _unavailable(url: str, exc: httpx.HTTPError) -> StateUnavailable:
    return StateUnavailable(url, repr(exc), timed_out=isinstance(exc, httpx.TimeoutException))


async def fetch_state(
    client: httpx.AsyncClient, internal_url: str, replica_id: str
) -> ReplicaState:
    """The replica's state now, within the client's timeouts; raises StateUnavailable."""
    url = state_url(internal_url, replica_id)
    try:
        try:
            resp = await client.get(url)
        except _STALE_CONNECTION:
            resp = await client.get(url)
    except httpx.HTTPError as exc:
        raise _unavailable(url, exc) from exc
    return _parse(url, resp)


def fetch_state_sync(client: httpx.Client, internal_url: str, replica_id: str) -> ReplicaState:
    """As `fetch_state`, for synchronous callers (the CLI)."""
    url = state_url(internal_url, replica_id)
    try:
        try:
            resp = client.get(url)
        except _STALE_CONNECTION:
            resp = client.get(url)
    except httpx.HTTPError as exc:
        raise _unavailable(url, exc) from exc
    return _parse(url, resp)
