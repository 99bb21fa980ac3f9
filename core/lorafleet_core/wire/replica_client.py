"""The one client of a replica agent's internal API (lorafleet_core.wire.agent_api): its state,
loading and unloading an adapter, and forgetting a deleted one.

Callers pass their own httpx client (connection pool and timeouts are theirs).

State (`fetch_state`, read by the gateway's poller, the operator's autoscaler, `lorafleet
status`, the standalone runner and the control API): a validated `ReplicaState` or one
exception, `StateUnavailable`, that says whether the replica was merely slow (`timed_out`: it
may still be there) or answered badly or not at all.

Load, unload and forget (`post_load`, `post_unload`, sent by the gateway's on-demand load and
the control API; `post_forget` and `post_forget_sync`, sent by the operator and the standalone
runner when an adapter is deleted): they carry the internal credential and return the
agent's answer as it came, whatever its status, for the caller to judge (the gateway retries
elsewhere, the control API passes it on); a request that got no answer raises httpx.HTTPError.
"""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from lorafleet_core.wire.agent_api import forget_url, load_url, state_url, unload_url
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_core.wire.replica_state import ReplicaState


class StateUnavailable(Exception):
    """The replica gave no usable state: no answer, an error status, or not a ReplicaState."""

    def __init__(self, url: str, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.timed_out = timed_out


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


def _credential(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


async def post_load(
    client: httpx.AsyncClient,
    internal_url: str,
    replica_id: str,
    record: AdapterRecord,
    *,
    gpu: bool,
    token: str | None,
) -> httpx.Response:
    """Hand the replica the registry's record of an adapter and have it loaded (into a GPU slot
    when `gpu`, else wherever a request would find it first). Sent once: each caller has its
    own fallback (the gateway the next candidate)."""
    payload = {"record": record.model_dump(mode="json"), "gpu": gpu}
    return await client.post(
        load_url(internal_url, replica_id, record.id), json=payload, headers=_credential(token)
    )


async def post_unload(
    client: httpx.AsyncClient,
    internal_url: str,
    replica_id: str,
    adapter_id: str,
    *,
    token: str | None,
) -> httpx.Response:
    """Have the replica drop the adapter from its GPU and RAM slots."""
    return await client.post(
        unload_url(internal_url, replica_id, adapter_id), headers=_credential(token)
    )


async def post_forget(
    client: httpx.AsyncClient,
    internal_url: str,
    replica_id: str,
    adapter_id: str,
    *,
    token: str | None,
) -> httpx.Response:
    """Tell the replica the adapter is gone from the registry: it drops the adapter's record,
    registration and disk copy (409 `adapter_busy` while requests run on it)."""
    return await client.post(
        forget_url(internal_url, replica_id, adapter_id), headers=_credential(token)
    )


def post_forget_sync(
    client: httpx.Client, internal_url: str, replica_id: str, adapter_id: str, *, token: str | None
) -> httpx.Response:
    """As `post_forget`, for synchronous callers (the standalone runner)."""
    return client.post(forget_url(internal_url, replica_id, adapter_id), headers=_credential(token))
