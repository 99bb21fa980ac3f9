"""Per-pool autoscaler daemon: scrape every ready replica's /state, decide, scale, report."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import kopf
from pydantic import ValidationError

from lorafleet_core.models import ReplicaPool, ReplicaPoolStatus
from lorafleet_core.names import GROUP, PLURAL_POOL, VERSION
from lorafleet_core.planning.autoscale import Load, ScaleState, recommend, stabilize
from lorafleet_core.planning.conditions import condition, merge_conditions
from lorafleet_core.planning.pool import clamp_replicas, selector_string
from lorafleet_core.replica_client import StateUnavailable, fetch_state
from lorafleet_core.replica_state import ReplicaState
from lorafleet_operator.handlers.pools import parse_pool
from lorafleet_operator.kube import (
    HOLDER,
    OperatorStoppingError,
    collection_path,
    lorafleet_path,
)
from lorafleet_operator.runtime import runtime
from lorafleet_operator.sync import Endpoint, FleetSync, status_patch

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
    last_status: dict[str, Any] | None = None
    async with httpx.AsyncClient(timeout=settings.scrape_timeout_seconds) as http:
        while not stopped and not HOLDER.closed:
            try:
                pool = parse_pool(body)
            except ValidationError:
                await _sleep(stopped, 10)
                continue
            try:
                state, last_status = await _tick(pool, body, fleet, http, state, last_status)
            except OperatorStoppingError:
                return
            except httpx.HTTPError as exc:
                log.warning("autoscaler %s/%s: %s", namespace, name, exc)
            await _sleep(stopped, pool.spec.autoscaling.poll_interval_seconds)


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
    last_status: dict[str, Any] | None,
) -> tuple[ScaleState, dict[str, Any] | None]:
    name, namespace = pool.metadata.name, fleet.namespace
    client = await HOLDER.client()
    endpoints = fleet.pool_endpoints(name)
    states = await scrape(http, endpoints)
    fleet.set_states(name, states)

    sts_path = f"{collection_path('apps/v1', 'statefulsets', namespace)}/{name}"
    sts = await client.get(sts_path)
    if sts is None:
        return state, last_status  # pool_reconcile has not created it yet
    current = int(sts.get("spec", {}).get("replicas") or 0)
    scaling = pool.spec.autoscaling
    if not scaling.enabled:
        desired, reason = clamp_replicas(pool, None), "AutoscalingDisabled"
        raw = desired
    elif not states:
        # No metrics (no ready replica answered): hold rather than guess.
        desired, reason, raw = clamp_replicas(pool, current), "NoMetrics", current
    else:
        raw = recommend(Load.of(states.values()), scaling, pool.spec.replicas)
        decision = stabilize(
            state,
            current,
            raw,
            time.monotonic(),
            scaling.scale_up_stabilization_seconds,
            scaling.scale_down_stabilization_seconds,
        )
        state, desired, reason = decision.state, decision.desired, decision.reason
    if desired != current:
        await client.merge_patch(sts_path, {"spec": {"replicas": desired}}, "StatefulSet")
        verb = "ScaledUp" if desired > current else "ScaledDown"
        load = Load.of(states.values())
        kopf.event(
            body,
            type="Normal",
            reason=verb,
            message=f"{current} -> {desired} replicas (recommended {raw}; tokens in flight "
            f"{load.tokens_in_flight}, queue depth {load.queue_depth})",
        )

    pods = [p for p in fleet.pods.values() if p.pool == name and not p.deleting]
    ready = sum(1 for p in pods if p.ready)
    now = datetime.now(UTC)
    old = ReplicaPoolStatus.model_validate(body.get("status") or {})
    conds = merge_conditions(
        old.conditions,
        [
            condition(
                "Ready",
                ready > 0,
                "ReplicasReady" if ready else "NoReadyReplicas",
                f"{ready}/{len(pods)} replicas ready",
                now,
            ),
            condition(
                "Scaling",
                desired != len(pods),
                reason,
                f"desired {desired}, recommended {raw}, current {current}",
                now,
            ),
        ],
    )
    status = old.model_copy(
        update={
            "replicas": len(pods),
            "ready_replicas": ready,
            "desired_replicas": desired,
            "selector": selector_string(name),
            "conditions": conds,
        }
    )
    patch = status_patch(status)
    comparable = {k: v for k, v in patch.items() if k != "conditions"} | {
        "conditions": [(c.type, c.status, c.reason, c.message) for c in conds]
    }
    if comparable != last_status:
        path = lorafleet_path(PLURAL_POOL, namespace, name, status=True)
        await client.merge_patch(path, {"status": patch}, "ReplicaPool/status")
        last_status = comparable
    return state, last_status
