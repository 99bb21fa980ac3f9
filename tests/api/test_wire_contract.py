"""The agent's wire contract (lorafleet_core.wire) as deployed peers see it.

During a rolling upgrade a gateway or operator of one release talks to agents of another, so
the strings on the wire are a protocol, not an implementation detail: this file states them
once, independently of the constants, so that renaming a constant's value fails here before
it fails in a mixed fleet. It also checks the one client of load, unload, forget and state
sends the requests the agent's routes take (over a real loopback HTTP server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args

import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lorafleet_agent.settings import AgentSettings
from lorafleet_core.api.models import LoRAAdapterSpec, Placement
from lorafleet_core.planning.replica_config import InsideAuth
from lorafleet_core.wire import agent_api, headers
from lorafleet_core.wire.error_codes import ErrorCode
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_core.wire.replica_client import fetch_state, post_forget, post_load, post_unload
from lorafleet_core.wire.tiers import TIER_NAMES
from lorafleet_operator.settings import OperatorSettings
from tests.api.conftest import REPO
from tests.gateway.servers import ServerThread
from tests.operator.factories import BASE_HASH, sha


def test_headers_keep_their_wire_names():
    assert {name: value for name, value in vars(headers).items() if name.startswith("HEADER_")} == {
        "HEADER_ADAPTER_ID": "x-adapter-id",
        "HEADER_ADAPTER_TIER": "x-adapter-tier",
        "HEADER_REPLICA_ID": "x-replica-id",
        "HEADER_TOKENS_ESTIMATE": "x-lorafleet-tokens-estimate",
        "HEADER_LOADED_FROM": "x-lorafleet-loaded-from",
        "HEADER_REQUEST_ID": "x-request-id",
    }


def test_error_codes_keep_their_wire_names():
    assert {code.name: str(code) for code in ErrorCode} == {
        "ADAPTER_NOT_REGISTERED": "adapter_not_registered",
        "ADAPTER_REJECTED": "adapter_rejected",
        "ADAPTER_LOAD_FAILED": "adapter_load_failed",
        "STORE_UNAVAILABLE": "store_unavailable",
        "ENGINE_UNAVAILABLE": "engine_unavailable",
        "CACHE_FULL": "cache_full",
        "RECORD_CONFLICT": "record_conflict",
        "ADAPTER_BUSY": "adapter_busy",
        "MERGED_ADAPTER": "merged_adapter",
        "WRONG_REPLICA": "wrong_replica",
        "AUTH_UNAVAILABLE": "auth_unavailable",
    }
    # An error body carries the plain string, whatever the enum is.
    assert json.dumps({"code": ErrorCode.ADAPTER_REJECTED}) == '{"code": "adapter_rejected"}'


def test_tiers_fastest_first_are_the_ones_an_adapter_status_names():
    """The status field is a Literal (the CRD's enum is generated from it); it must list the
    wire's tiers in the wire's order, or a placement the planner writes fails validation."""
    assert TIER_NAMES == ("gpu", "ram", "disk", "remote")
    assert get_args(Placement.model_fields["tier"].annotation) == TIER_NAMES


def test_agent_paths_from_a_base_url_with_or_without_its_slash():
    for base in ("http://10.0.0.7:8081", "http://10.0.0.7:8081/"):
        assert agent_api.state_url(base, "pool-0") == (
            "http://10.0.0.7:8081/internal/replicas/pool-0/state"
        )
        assert agent_api.load_url(base, "pool-0", "acme-v1") == (
            "http://10.0.0.7:8081/internal/replicas/pool-0/adapters/acme-v1/load"
        )
        assert agent_api.unload_url(base, "pool-0", "acme-v1") == (
            "http://10.0.0.7:8081/internal/replicas/pool-0/adapters/acme-v1/unload"
        )
        assert agent_api.forget_url(base, "pool-0", "acme-v1") == (
            "http://10.0.0.7:8081/internal/replicas/pool-0/adapters/acme-v1/forget"
        )


def test_every_default_of_the_token_audience_is_the_wire_one():
    """The agent checks, and the operator renders and sends, the audience the chart mints."""
    values = yaml.safe_load((REPO / "charts/lorafleet/values.yaml").read_text())
    assert agent_api.INTERNAL_AUDIENCE == "lorafleet-agent"
    assert values["internalAuth"]["audience"] == agent_api.INTERNAL_AUDIENCE
    assert AgentSettings.model_fields["internal_audience"].default == agent_api.INTERNAL_AUDIENCE
    operator_default = OperatorSettings.model_fields["replica_token_audience"].default
    assert operator_default == agent_api.INTERNAL_AUDIENCE
    assert InsideAuth().audience == agent_api.INTERNAL_AUDIENCE


class Recorder:
    """A replica's internal port that records what reaches it and answers like an agent."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def _record(self, request: Request) -> JSONResponse:
        self.seen.append(
            {
                "method": request.method,
                "path": request.url.path,
                "params": dict(request.path_params),
                "authorization": request.headers.get("authorization"),
                "content_type": request.headers.get("content-type"),
                "body": await request.body(),
            }
        )
        if request.url.path.endswith("/state"):
            return JSONResponse({"replica_id": request.path_params["replica_id"]})
        return JSONResponse({"adapter_id": request.path_params["adapter_id"], "tier": "gpu"})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(agent_api.STATE_ROUTE, self._record),
                Route(agent_api.LOAD_ROUTE, self._record, methods=["POST"]),
                Route(agent_api.UNLOAD_ROUTE, self._record, methods=["POST"]),
                Route(agent_api.FORGET_ROUTE, self._record, methods=["POST"]),
            ]
        )


@pytest.fixture
def replica() -> Iterator[tuple[Recorder, str]]:
    recorder = Recorder()
    with ServerThread(recorder.app()) as server:
        yield recorder, server.url


def _record(adapter_id: str) -> AdapterRecord:
    spec = LoRAAdapterSpec.model_validate(
        {
            "tenant": "acme",
            "version": "v1",
            "baseModelHash": BASE_HASH,
            "rank": 8,
            "alpha": 16,
            "targetModules": ["q_proj", "v_proj"],
            "weightsUri": f"s3://adapters/acme/{adapter_id}/",
            "checksum": sha(adapter_id),
        }
    )
    return AdapterRecord.from_spec(adapter_id, spec)


async def test_the_client_sends_load_unload_forget_and_state_as_the_agent_takes_them(replica):
    recorder, url = replica
    record = _record("acme-v1")
    async with httpx.AsyncClient(timeout=10) as client:
        loaded = await post_load(client, url, "pool-0", record, gpu=True, token="agent-token")
        plain = await post_load(client, url, "pool-0", record, gpu=False, token=None)
        gone = await post_unload(client, url, "pool-0", "acme-v1", token="agent-token")
        forgot = await post_forget(client, url, "pool-0", "acme-v1", token="agent-token")
        state = await fetch_state(client, url, "pool-0")
    statuses = (loaded.status_code, plain.status_code, gone.status_code, forgot.status_code)
    assert statuses == (200, 200, 200, 200)
    assert state.replica_id == "pool-0"

    load, load_plain, unload, forget, get = recorder.seen
    assert (load["method"], load["path"]) == (
        "POST",
        "/internal/replicas/pool-0/adapters/acme-v1/load",
    )
    assert load["params"] == {"replica_id": "pool-0", "adapter_id": "acme-v1"}
    assert load["authorization"] == "Bearer agent-token"
    assert load["content_type"] == "application/json"
    assert json.loads(load["body"]) == {"record": record.model_dump(mode="json"), "gpu": True}
    # The record round-trips: what the agent parses is the registry's record.
    assert AdapterRecord.model_validate(json.loads(load["body"])["record"]) == record
    assert load_plain["authorization"] is None  # no credential configured: none sent
    assert json.loads(load_plain["body"])["gpu"] is False
    assert (unload["method"], unload["path"]) == (
        "POST",
        "/internal/replicas/pool-0/adapters/acme-v1/unload",
    )
    assert unload["authorization"] == "Bearer agent-token"
    assert unload["body"] == b""  # an unload carries nothing but the credential
    assert (forget["method"], forget["path"], forget["authorization"], forget["body"]) == (
        "POST",
        "/internal/replicas/pool-0/adapters/acme-v1/forget",
        "Bearer agent-token",
        b"",
    )
    assert (get["method"], get["path"], get["authorization"]) == (
        "GET",
        "/internal/replicas/pool-0/state",
        None,  # state is read without a credential
    )
