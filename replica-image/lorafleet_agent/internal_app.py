"""The internal port: replica state, explicit load/unload/forget, metrics and health probes.

Its /metrics carries vLLM's `vllm:` families too (lorafleet_agent.engine_metrics).
Load, unload and forget require the internal credential (lorafleet_agent.internal_auth says why and
why the read-only endpoints do not).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from lorafleet_agent.engine_metrics import engine_families
from lorafleet_agent.held_records import RecordConflict
from lorafleet_agent.http_edge import (
    APP_OPTIONS,
    BodyRefused,
    error_response,
    install_openai_errors,
    read_json,
)
from lorafleet_agent.internal_auth import Authenticator
from lorafleet_agent.manager import AdapterManager, CacheFull
from lorafleet_agent.object_store import FetchError, StoreUnavailable
from lorafleet_agent.requests_stats import RequestStats
from lorafleet_agent.verifier import VerificationError
from lorafleet_agent.vllm_client import VllmError
from lorafleet_core.wire.agent_api import (
    FORGET_ROUTE,
    LOAD_ROUTE,
    METRICS_ROUTE,
    STATE_ROUTE,
    UNLOAD_ROUTE,
)
from lorafleet_core.wire.error_codes import ErrorCode
from lorafleet_core.wire.records import AdapterRecord, is_adapter_id
from lorafleet_core.wire.replica_state import MergedServing, ReplicaState
from lorafleet_core.wire.tiers import Tier

log = logging.getLogger(__name__)


MAX_LOAD_BODY_BYTES = 1 << 20  # a load carries one adapter record: a few hundred bytes


def replica_state(
    manager: AdapterManager, stats: RequestStats, replica_id: str, warming: bool = False
) -> ReplicaState:
    resident = manager.resident()
    return ReplicaState(
        replica_id=replica_id,
        gpu_adapters=resident[Tier.GPU],
        merged=MergedServing(adapter_id=manager.merged.adapter_id, checksum=manager.merged.checksum)
        if manager.merged
        else None,
        ram_adapters=resident[Tier.RAM],
        disk_adapters=resident[Tier.DISK],
        failed_adapters=dict(manager.failed),
        queue_depth=max(stats.queued, 0),
        running_requests=max(stats.running, 0),
        tokens_in_flight=max(stats.tokens_in_flight, 0),
        tokens_per_second=stats.tokens_per_second(),
        adapters=stats.adapter_activity(),
        loads_per_min=manager.loads.per_min(),
        evictions_per_min=manager.evictions.per_min(),
        warming=warming,
        engine_ready=manager.ready,
        timestamp=time.time(),
    )


def build_internal_app(
    manager: AdapterManager,
    stats: RequestStats,
    own_id: str,
    auth: Authenticator,
    warming: Callable[[], bool] | None = None,
) -> FastAPI:
    """The internal port of replica `own_id`; `warming` says whether the first pre-warm pass is
    still running."""
    app = FastAPI(title="lorafleet agent (internal)", **APP_OPTIONS)
    install_openai_errors(app)

    async def unauthorized(request: Request) -> JSONResponse | None:
        refusal = await auth.check(request.headers.get("authorization"))
        if refusal is None:
            return None
        manager.metrics.internal_auth_failures.inc()
        client = request.client.host if request.client else "?"
        log.warning("refused %s %s from %s: %s", request.method, request.url.path[:200],
                    client, refusal.message)  # fmt: skip
        if refusal.status == 503:  # the credential could not be checked: fail closed
            return error_response(503, refusal.message, ErrorCode.AUTH_UNAVAILABLE)
        resp = error_response(401, refusal.message, "unauthorized")
        resp.headers["www-authenticate"] = "Bearer"
        return resp

    def wrong_replica(replica_id: str) -> JSONResponse | None:
        if replica_id != own_id:
            return error_response(
                404, f"this is replica {own_id}, not {replica_id}", ErrorCode.WRONG_REPLICA
            )
        return None

    @app.get(STATE_ROUTE, response_model=None)
    async def state(replica_id: str) -> ReplicaState | JSONResponse:
        warm = warming() if warming is not None else False
        return wrong_replica(replica_id) or replica_state(manager, stats, own_id, warm)

    @app.post(LOAD_ROUTE)
    async def load(replica_id: str, adapter_id: str, request: Request) -> JSONResponse:
        if (err := await unauthorized(request) or wrong_replica(replica_id)) is not None:
            return err
        try:
            payload: Any = await read_json(request, MAX_LOAD_BODY_BYTES)
            record = AdapterRecord.model_validate(payload["record"])
        except BodyRefused as exc:
            return exc.response()
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            return error_response(
                400,
                f"body must be {{'record': AdapterRecord, 'gpu': bool}}: {exc}",
                "invalid_request",
            )
        if not manager.ready:
            return error_response(
                503, "replica is starting: vLLM is not ready", ErrorCode.ENGINE_UNAVAILABLE
            )
        if record.id != adapter_id:
            return error_response(
                400, f"record id {record.id} does not match {adapter_id}", "invalid_request"
            )
        # An explicit load retries an adapter refused before (e.g. its upload was fixed); the
        # data path never does, it answers 422 until then.
        manager.failed.pop(adapter_id, None)
        try:
            manager.add_record(record)
            # One registration; `from` is where this load found the adapter (the gateway passes
            # it on the request it retries, which then reports that tier).
            if bool(payload.get("gpu")):
                found = await manager.warm_gpu(adapter_id)
            else:
                found = await manager.ensure_registered(adapter_id)
        except RecordConflict as exc:
            return error_response(409, str(exc), ErrorCode.RECORD_CONFLICT)
        except VerificationError:
            return error_response(
                422, manager.failed.get(adapter_id, "refused"), ErrorCode.ADAPTER_REJECTED
            )
        except StoreUnavailable as exc:
            return error_response(
                503, f"could not fetch adapter {adapter_id}: {exc}", ErrorCode.STORE_UNAVAILABLE
            )
        except (FetchError, VllmError) as exc:
            return error_response(
                502, f"could not load adapter {adapter_id}: {exc}", ErrorCode.ADAPTER_LOAD_FAILED
            )
        except CacheFull as exc:
            return error_response(503, str(exc), ErrorCode.CACHE_FULL)
        return JSONResponse(
            {
                "adapter_id": adapter_id,
                "tier": manager.tier_of(adapter_id).value,
                "from": found.value,
            }
        )

    @app.post(UNLOAD_ROUTE)
    async def unload(replica_id: str, adapter_id: str, request: Request) -> JSONResponse:
        if (err := await unauthorized(request) or wrong_replica(replica_id)) is not None:
            return err
        if not await manager.unload(adapter_id):
            return error_response(
                409, f"adapter {adapter_id} has running requests", ErrorCode.ADAPTER_BUSY
            )
        return JSONResponse({"adapter_id": adapter_id, "tier": manager.tier_of(adapter_id).value})

    @app.post(FORGET_ROUTE)
    async def forget(replica_id: str, adapter_id: str, request: Request) -> JSONResponse:
        if (err := await unauthorized(request) or wrong_replica(replica_id)) is not None:
            return err
        if not is_adapter_id(adapter_id):
            # Never a folder name: `..` would have the disk tier delete the cache's parent.
            return error_response(400, "adapter_id is not an adapter id", "invalid_request")
        if manager.is_merged(adapter_id):
            # Its weights are this replica's weights: nothing can be dropped while it runs;
            # pods built without it (the pool's rollout) are how it goes.
            return error_response(
                409,
                f"adapter {adapter_id} is merged into this replica's weights; "
                "it goes with the pool's pods, not by forgetting",
                ErrorCode.MERGED_ADAPTER,
            )
        if not await manager.forget(adapter_id):
            return error_response(
                409, f"adapter {adapter_id} has running requests", ErrorCode.ADAPTER_BUSY
            )
        return JSONResponse({"adapter_id": adapter_id, "tier": manager.tier_of(adapter_id).value})

    @app.get(METRICS_ROUTE)
    async def metrics(engine: bool = True) -> Response:
        # The engine's families follow the agent's in one exposition: one scrape target per pod
        # for the PodMonitor and for schedulers that read vLLM's names from a model server.
        # `engine=false` (AGENT_ONLY_METRICS): the agent's alone, never waiting on vLLM.
        own = generate_latest(manager.metrics.registry)
        if not engine:
            return Response(own, media_type=CONTENT_TYPE_LATEST)
        engine_text = await manager.vllm.engine_metrics()
        body = own + engine_families(engine_text) if engine_text is not None else own
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        # The engine watch keeps `ready` in step with vLLM (with a tolerance for one slow
        # health check, which a probe here would not have).
        # Pre-warm does not hold readiness back: the operator plans owners over ready pods and
        # writes the owned set only then, so a probe waiting for the pass would never see it.
        # The gateway keeps requests off a warming replica instead (ReplicaState.warming).
        if manager.ready:
            warm = warming() if warming is not None else False
            return JSONResponse({"status": "ready", "warming": warm})
        return error_response(503, "vLLM is not ready", ErrorCode.ENGINE_UNAVAILABLE)

    return app
