"""Per-pool loop: scrape every ready replica's /state, decide, scale, write the pool's status.

This daemon is the one writer of ReplicaPool status (pool_reconcile only applies the objects a
pool owns). Each tick: scrape, let the pure planners decide (lorafleet_core.planning.pool_status:
`plan_scale`, `plan_pool_status`), apply: the StatefulSet's replica count, then the status when
it changed.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import aiohttp
import httpx
import kopf
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from lorafleet_core.api import reasons
from lorafleet_core.api.models import ConditionStatus, ReplicaPool, ReplicaPoolStatus
from lorafleet_core.api.names import GROUP, PLURAL_POOL, VERSION
from lorafleet_core.planning.agent_access import AccessCheck, needed, pool_account
from lorafleet_core.planning.autoscale import ScaleState
from lorafleet_core.planning.conditions import find
from lorafleet_core.planning.pool_status import (
    PoolObservation,
    ScalePlan,
    plan_pool_status,
    plan_scale,
)
from lorafleet_core.wire.replica_client import StateUnavailable, fetch_state
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_operator.errors import describe
from lorafleet_operator.fleet_index import Endpoint
from lorafleet_operator.handlers import merged
from lorafleet_operator.handlers.internal_secret import ensure_gateway_secret
from lorafleet_operator.handlers.pools import parse_pool
from lorafleet_operator.kube import HOLDER, OperatorStoppingError
from lorafleet_operator.runtime import runtime
from lorafleet_operator.sync import FleetSync, status_patch

log = logging.getLogger(__name__)


async def scrape(http: httpx.AsyncClient, endpoints: list[Endpoint]) -> dict[str, ReplicaState]:
    """Latest state of each replica that answered; silent replicas are left out."""

    async def one(ep: Endpoint) -> ReplicaState | None:
        if not ep.ip:
            return None
        try:
            return await fetch_state(http, f"http://{ep.ip}:{ep.port}", ep.replica_id)
        except StateUnavailable as exc:
            log.info("scrape failed: %s", exc)
            return None

    results = await asyncio.gather(*(one(ep) for ep in endpoints))
    return {s.replica_id: s for s in results if s is not None}


@kopf.daemon(GROUP, VERSION, PLURAL_POOL, cancellation_timeout=5.0)
async def autoscaler(
    *, stopped: kopf.DaemonStopped, body: kopf.Body, name: str, namespace: str | None, **_: Any
) -> None:
    assert namespace is not None
    settings = runtime().settings
    fleet = runtime().fleet(namespace)
    state = ScaleState()
    last_status: Any = None
    async with httpx.AsyncClient(timeout=settings.scrape_timeout_seconds) as http:
        while not stopped and not HOLDER.closed:
            interval = 10.0
            try:
                pool: ReplicaPool | None = parse_pool(body)
                invalid = None
            except ValidationError as exc:
                pool, invalid = None, describe(exc)
            try:
                if pool is None:
                    last_status = await _write_status(
                        name, namespace, body, None, invalid, PoolObservation(), last_status
                    )
                else:
                    interval = pool.spec.autoscaling.poll_interval_seconds
                    state, last_status = await _tick(pool, body, fleet, http, state, last_status)
            except OperatorStoppingError:
                return
            except (httpx.HTTPError, ApiException, aiohttp.ClientError) as exc:
                log.warning("autoscaler %s/%s: %s", namespace, name, exc)
            await _sleep(stopped, interval)


async def _sleep(stopped: kopf.DaemonStopped, seconds: float) -> None:
    """Sleep, but wake when kopf stops this daemon or the operator is stopping at all.

    kopf may spawn a daemon for an event that arrives while the operator stops; that one's
    `stopped` is never set, so the operator-wide flag is checked too, every half second.
    Plain sleeps, not `stopped.wait(timeout)`: that wraps a task around Event.wait, and kopf's
    shutdown re-raises the TimeoutError of such a task if it catches one in flight.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not stopped and not HOLDER.closed:
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(left, 0.5))


async def _tick(
    pool: ReplicaPool,
    body: kopf.Body,
    fleet: FleetSync,
    http: httpx.AsyncClient,
    state: ScaleState,
    last_status: Any,
) -> tuple[ScaleState, Any]:
    name, namespace = pool.metadata.name, fleet.namespace
    kube = await HOLDER.client()
    states = await scrape(http, fleet.index.pool_endpoints(name))
    fleet.index.set_states(name, states)

    merge = None
    # The gateway pool's: re-checked on a timer (a deleted one comes back); a merged pool's:
    # once per pool object and process.
    await ensure_gateway_secret(pool, body, namespace)
    await merged.ensure_internal_secret(pool, body, namespace)
    if pool.spec.merged is not None:
        old = ReplicaPoolStatus.model_validate(body.get("status") or {}).merge
        merge = await merged.merge_tick(pool, body, fleet, old)
    sts = await kube.read_owned("StatefulSet", namespace, name)
    if merge is not None:
        current_count = None if sts is None else int(sts.get("spec", {}).get("replicas") or 0)
        await merged.apply_merged_pool(pool, namespace, merge.status, current_count)
        sts = await kube.read_owned("StatefulSet", namespace, name)
    scale: ScalePlan | None = None
    current: int | None = None
    if sts is not None:  # else pool_reconcile has not created it yet
        current = int(sts.get("spec", {}).get("replicas") or 0)
        scale = plan_scale(pool, current, states, state)
        state = scale.state
        if scale.desired != current:
            await kube.scale_statefulset(namespace, name, scale.desired)
            verb = "ScaledUp" if scale.desired > current else "ScaledDown"
            kopf.event(
                body,
                type="Normal",
                reason=verb,
                message=f"{current} -> {scale.desired} replicas (recommended "
                f"{scale.recommended}; tokens in flight {scale.load.tokens_in_flight}, queue "
                f"depth {scale.load.queue_depth})",
            )
    pods = [p for p in fleet.index.pods.values() if p.pool == name and not p.deleting]
    seen = PoolObservation(
        pods=len(pods),
        ready=sum(1 for p in pods if p.ready),
        current=current,
        scale=scale,
        merge=merge,
        access=await _access(pool, namespace),
    )
    last_status = await _write_status(name, namespace, body, pool, None, seen, last_status)
    return state, last_status


async def _access(pool: ReplicaPool, namespace: str) -> AccessCheck | None:
    """What the pool's ServiceAccount may not do of what its agents ask (tokenReview mode),
    from the runtime's cache of SubjectAccessReviews; None when the agents ask nothing."""
    inside = runtime().settings.inside_auth()
    perms = needed(inside)
    if not perms:
        return None
    kube = await HOLDER.client()
    account = pool_account(pool, inside)
    return await runtime().access.check(kube.review_access, namespace, account, perms)


async def _write_status(
    name: str,
    namespace: str,
    body: kopf.Body,
    pool: ReplicaPool | None,
    invalid: str | None,
    seen: PoolObservation,
    last_status: Any,
) -> Any:
    """Plan the status and write it when it differs from the last write (times aside)."""
    old = ReplicaPoolStatus.model_validate(body.get("status") or {})
    status = plan_pool_status(
        name,
        old,
        pool,
        seen,
        datetime.now(UTC),
        invalid=invalid,
        generation=body.get("metadata", {}).get("generation"),
    )
    comparable = _comparable(status)
    if last_status is None and body.get("status"):
        # First tick of this process (a restart): what is on the object is the last write,
        # so an unchanged pool is not rewritten on every operator start.
        last_status = _comparable(old)
    if comparable != last_status:
        kube = await HOLDER.client()
        await kube.patch_status(PLURAL_POOL, namespace, name, status_patch(status))
        _warn_if_newly_invalid(body, old, status)
        _warn_if_newly_missing(body, old, status, last_status)
    return comparable


def _warn_if_newly_invalid(body: kopf.Body, old: ReplicaPoolStatus, new: ReplicaPoolStatus) -> None:
    """A Warning Event when the pool turns InvalidSpec, as an adapter or alias gets one: kopf's
    own event for the failed handler is of type Error with reason Logging, which a watch on
    `type=Warning` Events (or `kubectl get events --field-selector type=Warning`) misses."""
    now, before = find(new.conditions, reasons.READY), find(old.conditions, reasons.READY)
    if now is None or (now.status, now.reason) != (ConditionStatus.FALSE, reasons.INVALID_SPEC):
        return
    if before is not None and (before.status, before.reason) == (now.status, now.reason):
        return  # already reported (this run, or the run before a restart)
    kopf.event(body, type="Warning", reason=reasons.INVALID_SPEC, message=now.message)


def _warn_if_newly_missing(
    body: kopf.Body, old: ReplicaPoolStatus, new: ReplicaPoolStatus, last: Any
) -> None:
    """A Warning Event when the pool's ServiceAccount turns out to lack what its agents need:
    once per finding, not per tick. Both the object's status and this loop's last write are
    consulted, as the body may not show that write yet (the watch event lags the patch)."""
    now = find(new.conditions, reasons.AGENT_PERMISSIONS)
    if now is None or now.status == ConditionStatus.TRUE:
        return
    before = find(old.conditions, reasons.AGENT_PERMISSIONS)
    if before is not None and (before.status, before.message) == (now.status, now.message):
        return
    written = (last or {}).get("conditions") or []
    if (now.type, now.status, now.reason, now.message) in written:
        return
    kopf.event(body, type="Warning", reason=now.reason, message=now.message)


def _comparable(status: ReplicaPoolStatus) -> dict[str, Any]:
    """A status as compared for "changed": everything but the conditions' times."""
    patch = status_patch(status)
    return {k: v for k, v in patch.items() if k != "conditions"} | {
        "conditions": [(c.type, c.status, c.reason, c.message) for c in status.conditions]
    }
