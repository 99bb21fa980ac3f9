"""The control API's routes (FastAPI), on their own port, every one behind the admin credential.

- `POST /internal/adapters`: register an adapter version
  (lorafleet_core.planning.adapter_registration):
  201 created, 200 when the identical version exists (idempotent), 409 when that id exists with
  another spec (versions are immutable), 422 with every reason it would be refused.
- `PUT /internal/aliases/{alias}` `{"adapter_id"}`: deploy, or roll back by naming the previous
  adapter (lorafleet_core.planning.alias_deploy, the CLI's rules), written by compare-and-swap
  (lorafleet_core.storage.swap) so racing writers in other processes never overwrite it
  unseen. `{alias}` is the public model name `tenant/name:tag`, URL-encoded
  (`acme%2Fsupport:prod`).
- `GET /internal/aliases/{alias}`: where the alias's deploy stands (the version asked for, the one
  served, the Deployed reason: AwaitingReplicas, ProgressDeadlineExceeded, ...), from its status.
- `POST /internal/replicas/{id}/adapters/{aid}/load|unload`, `GET /internal/replicas/{id}/state`:
  forwarded to that replica's agent. A load carries the registry's record of the adapter (the
  LoRAAdapter object), never anything from the caller but the `gpu` flag.

Errors are OpenAI-shaped ({"error": {message, type, param, code}}); a 422 adds `reasons`.
The OpenAPI document is at `/internal/openapi.json`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from lorafleet_core.api import names
from lorafleet_core.api.models import (
    DEFAULT_PROGRESS_DEADLINE_S,
    AdapterAliasStatus,
    ConditionStatus,
    LoRAAdapterSpec,
)
from lorafleet_core.api.reasons import DEPLOYED
from lorafleet_core.planning.adapter_registration import (
    AdapterRegistration,
    Comparison,
    compare,
    problems,
)
from lorafleet_core.planning.alias_deploy import (
    AdapterNotFound,
    AliasError,
    AliasNameTaken,
    InvalidAlias,
    alias_object_name,
    pick_alias,
    plan_set,
)
from lorafleet_core.storage.swap import SWAP_TRIES, WriteConflict, retry_swaps_async
from lorafleet_core.wire.agent_api import LOAD_ROUTE, STATE_ROUTE, UNLOAD_ROUTE
from lorafleet_core.wire.error_codes import ErrorCode
from lorafleet_core.wire.openai_errors import error_body
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_core.wire.replica_client import (
    StateUnavailable,
    fetch_state,
    post_load,
    post_unload,
)
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_operator.control.auth import ControlAuth
from lorafleet_operator.control.edge import ControlEdge
from lorafleet_operator.control.store import AlreadyExists, ControlStore, StoreError

OPENAPI_URL = "/internal/openapi.json"


class ControlError(Exception):
    def __init__(self, status: int, message: str, code: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra


def _answer(status: int, message: str, code: str | None, **extra: Any) -> JSONResponse:
    body = error_body(status, message, code=code)
    body["error"].update(extra)
    resp = JSONResponse(body, status_code=status)
    if status == 401:
        resp.headers["www-authenticate"] = "Bearer"
    return resp


class KeyedLocks:
    """One asyncio.Lock per key, dropped when nobody holds or awaits it (keys stay bounded)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class AliasChange(BaseModel):
    model_config = ConfigDict(strict=True)

    adapter_id: str = Field(description="The LoRAAdapter (adapter version) the alias serves.")


class AliasResult(BaseModel):
    alias: str
    object_name: str
    adapter_id: str
    previous_adapter_id: str | None = Field(description="What spec.adapter named before.")


class AliasState(BaseModel):
    """Where a deploy of the alias stands, from the AdapterAlias's spec and status."""

    alias: str
    object_name: str
    adapter_id: str = Field(description="The version asked for (spec.adapter).")
    serving_adapter_id: str | None = Field(
        description="The version served now (status.adapter): the previous one until a "
        "replica has verified adapter_id's files; null before the first deploy."
    )
    previous_adapter_id: str | None = Field(description="status.previousAdapter (rollback).")
    deployed: bool = Field(description="The Deployed condition is True: adapter_id serves.")
    reason: str | None = Field(
        description="The Deployed condition's reason, e.g. AwaitingReplicas (waiting for a "
        "replica to verify the files), ProgressDeadlineExceeded (waiting longer than "
        "progress_deadline_seconds; it still completes if verified later), AdapterNotReady."
    )
    message: str | None = Field(description="The Deployed condition's message.")
    deploying_since: datetime | None = Field(
        description="When the deploy of adapter_id began (status.deploying.startedAt); null "
        "once it serves."
    )
    progress_deadline_seconds: int = Field(description="spec.progressDeadlineSeconds.")


class LoadRequest(BaseModel):
    model_config = ConfigDict(strict=True)  # `{"gpu": "yes"}` is a 422, not true

    gpu: bool = Field(default=False, description="Also warm the adapter into a GPU slot.")


class AdapterResult(BaseModel):
    adapter_id: str
    created: bool = Field(description="False: the identical version already existed.")
    manifest: dict[str, Any]


def build_control_app(
    store: ControlStore,
    auth: ControlAuth,
    *,
    http: httpx.AsyncClient,
    replica_token: Callable[[], str | None] = lambda: None,
) -> FastAPI:
    app = FastAPI(
        title="lorafleet control API",
        version="v1alpha1",
        openapi_url=OPENAPI_URL,
        docs_url=None,
        redoc_url=None,
    )
    bearer = Depends(
        HTTPBearer(auto_error=False, description="the admin token, or a ServiceAccount token")
    )

    # `bearer` only declares the scheme in the OpenAPI document; `auth` decides.
    async def authorized(request: Request, _: Any = bearer) -> None:
        if not await auth.allows(request.headers.get("authorization")):
            raise ControlError(401, "a valid control credential is required", "unauthorized")

    guarded: list[Any] = [Depends(authorized)]
    # The credential is checked again there, before the body is read (control.edge): FastAPI
    # reads a body before it runs dependencies.
    app.add_middleware(ControlEdge, allows=auth.allows, open_paths=frozenset({OPENAPI_URL}))

    @app.exception_handler(ControlError)
    async def _control_error(_r: Request, exc: ControlError) -> JSONResponse:
        return _answer(exc.status, exc.message, exc.code, **exc.extra)

    @app.exception_handler(StoreError)
    async def _store_error(_r: Request, exc: StoreError) -> JSONResponse:
        return _answer(502, str(exc), ErrorCode.STORE_UNAVAILABLE)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, exc: RequestValidationError) -> JSONResponse:
        reasons = [
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}"
            for e in exc.errors()
        ]
        return _answer(422, "; ".join(reasons), "invalid_request", reasons=reasons)

    @app.exception_handler(Exception)
    async def _unexpected(_r: Request, exc: Exception) -> JSONResponse:
        # Still a bug to fix, but answered in the API's shape, never as text/plain.
        return _answer(500, f"internal error: {type(exc).__name__}", "internal_error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_r: Request, exc: StarletteHTTPException) -> JSONResponse:
        # 400 is FastAPI's answer to a body it cannot decode (bad UTF-8, nesting too deep).
        code = "invalid_request" if exc.status_code == 400 else None
        return _answer(exc.status_code, str(exc.detail), code)

    @app.post(
        "/internal/adapters",
        dependencies=guarded,
        status_code=201,
        response_model=AdapterResult,
        responses={200: {"model": AdapterResult}, 409: {}, 422: {}},
    )
    async def register(reg: AdapterRegistration) -> Any:
        body = reg.manifest()
        # Off the event loop: on a cluster it is the operator's, and schema and CEL checks
        # of a large body take a while.
        reasons = await asyncio.to_thread(problems, body, await store.list(names.KIND_POOL))
        if reasons:
            raise ControlError(
                422, "; ".join(reasons), "adapter_invalid", param="body", reasons=reasons
            )
        for _ in range(2):  # a create that loses a race re-reads and compares
            existing = await store.get(names.KIND_ADAPTER, reg.adapter_id)
            verdict = compare(existing, body)
            if verdict is Comparison.CONFLICT:
                raise ControlError(
                    409,
                    f"LoRAAdapter {reg.adapter_id} exists with a different spec; versions are "
                    "immutable: register a new adapter_id",
                    "adapter_conflict",
                )
            if verdict is Comparison.IDENTICAL:
                result = AdapterResult(adapter_id=reg.adapter_id, created=False, manifest=body)
                return JSONResponse(result.model_dump(), status_code=200)
            try:
                await store.create(body)
            except AlreadyExists:
                continue
            return AdapterResult(adapter_id=reg.adapter_id, created=True, manifest=body)
        raise ControlError(409, f"LoRAAdapter {reg.adapter_id} changed meanwhile", "conflict")

    # One deploy of an alias at a time in this process, so its own concurrent PUTs of one alias
    # queue instead of refusing each other's swaps. Other processes (another operator replica,
    # `lorafleet alias set`) are kept out by the store's compare-and-swap.
    alias_locks = KeyedLocks()

    async def plan_alias(
        alias: str, adapter_id: str
    ) -> tuple[dict[str, Any], str | None, dict[str, Any] | None]:
        # The alias is read last: the shorter the time from its read to the swap, the less
        # often a racing writer makes the swap fail.
        found = await store.get(names.KIND_ADAPTER, adapter_id)
        pools = await store.list(names.KIND_POOL)
        occupant = await store.get(names.KIND_ALIAS, alias_object_name(alias))
        existing = pick_alias(alias, occupant, [])
        if existing is None:
            existing = pick_alias(alias, None, await store.list(names.KIND_ALIAS))
        try:
            body, previous = plan_set(
                alias,
                adapter_id,
                found=found,
                pools=pools,
                existing=existing,
                occupant=occupant,
                where=store.description,
            )
        except InvalidAlias as exc:
            raise ControlError(422, str(exc), "invalid_alias", reasons=[str(exc)]) from exc
        except AdapterNotFound as exc:
            raise ControlError(404, str(exc), "adapter_not_found") from exc
        except AliasNameTaken as exc:
            raise ControlError(409, str(exc), "alias_name_taken") from exc
        except AliasError as exc:
            raise ControlError(409, str(exc), "alias_refused") from exc
        return body, previous, dict(existing) if existing is not None else None

    @app.put("/internal/aliases/{alias:path}", dependencies=guarded, response_model=AliasResult)
    async def set_alias(alias: str, change: AliasChange) -> AliasResult:
        async def deploy() -> tuple[dict[str, Any], str | None]:
            # Written only over the version read (a create when there was none), so
            # `previous` is what the alias named right before this write, whoever else writes.
            async with store.writing() as swap:
                body, previous, existing = await plan_alias(alias, change.adapter_id)
                await swap(body, existing)
            return body, previous

        async with alias_locks.hold(alias):
            try:
                body, previous = await retry_swaps_async(deploy)
            except WriteConflict as exc:
                raise ControlError(
                    409,
                    f"AdapterAlias for {alias} kept changing meanwhile ({SWAP_TRIES} tries); "
                    "try again",
                    "conflict",
                ) from exc
        return AliasResult(
            alias=alias,
            object_name=str(body["metadata"]["name"]),
            adapter_id=change.adapter_id,
            previous_adapter_id=previous,
        )

    @app.get("/internal/aliases/{alias:path}", dependencies=guarded, response_model=AliasState)
    async def get_alias(alias: str) -> AliasState:
        found = pick_alias(alias, await store.get(names.KIND_ALIAS, alias_object_name(alias)), [])
        if found is None:
            found = pick_alias(alias, None, await store.list(names.KIND_ALIAS))
        if found is None:
            raise ControlError(
                404, f"no AdapterAlias for {alias} in {store.description}", "alias_not_found"
            )
        if found.get("status") is None:  # a folder's listing carries no status: read it again
            name = str(found["metadata"]["name"])
            found = await store.get(names.KIND_ALIAS, name) or found
        spec = found.get("spec") or {}
        try:
            status = AdapterAliasStatus.model_validate(found.get("status") or {})
        except ValidationError as exc:
            raise ControlError(502, f"unreadable status of {alias}", "invalid") from exc
        deployed = next((c for c in status.conditions if c.type == DEPLOYED), None)
        return AliasState(
            alias=alias,
            object_name=str(found["metadata"]["name"]),
            adapter_id=str(spec.get("adapter")),
            serving_adapter_id=status.adapter,
            previous_adapter_id=status.previous_adapter,
            deployed=deployed is not None and deployed.status == ConditionStatus.TRUE,
            reason=deployed.reason if deployed else None,
            message=deployed.message if deployed else None,
            deploying_since=status.deploying.started_at if status.deploying else None,
            progress_deadline_seconds=int(
                spec.get("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE_S)
            ),
        )

    async def agent(replica_id: str) -> str:
        url = await store.replica_url(replica_id)
        if url is None:
            raise ControlError(404, f"no replica {replica_id} in {store.description}", "no_replica")
        return url

    async def forward(call: Awaitable[httpx.Response]) -> JSONResponse:
        try:
            resp = await call
        except httpx.HTTPError as exc:
            raise ControlError(502, f"replica unreachable: {exc!r}", "replica_unreachable") from exc
        try:
            content = resp.json()
        except ValueError:
            content = error_body(502, f"replica answered {resp.status_code} without JSON")
            return JSONResponse(content, status_code=502)
        return JSONResponse(content, status_code=resp.status_code)

    async def record_of(adapter_id: str) -> AdapterRecord:
        found = await store.get(names.KIND_ADAPTER, adapter_id)
        if found is None:
            raise ControlError(404, f"LoRAAdapter {adapter_id} not found", "adapter_not_found")
        try:
            spec = LoRAAdapterSpec.model_validate(found.get("spec") or {})
        except ValidationError as exc:
            raise ControlError(409, f"LoRAAdapter {adapter_id} is invalid", "invalid") from exc
        if (found.get("status") or {}).get("phase") == "Rejected":
            raise ControlError(
                409, f"LoRAAdapter {adapter_id} was rejected", ErrorCode.ADAPTER_REJECTED
            )
        return AdapterRecord.from_spec(adapter_id, spec)

    @app.post(LOAD_ROUTE, dependencies=guarded)
    async def load(replica_id: str, adapter_id: str, req: LoadRequest | None = None) -> Any:
        record = await record_of(adapter_id)
        base = await agent(replica_id)
        gpu = bool(req and req.gpu)
        return await forward(
            post_load(http, base, replica_id, record, gpu=gpu, token=replica_token())
        )

    @app.post(UNLOAD_ROUTE, dependencies=guarded)
    async def unload(replica_id: str, adapter_id: str) -> Any:
        base = await agent(replica_id)
        return await forward(post_unload(http, base, replica_id, adapter_id, token=replica_token()))

    @app.get(STATE_ROUTE, dependencies=guarded, response_model=ReplicaState)
    async def state(replica_id: str) -> ReplicaState:
        base = await agent(replica_id)
        try:
            return await fetch_state(http, base, replica_id)
        except StateUnavailable as exc:
            status = 504 if exc.timed_out else 502
            raise ControlError(status, str(exc), "replica_unavailable") from exc

    return app
