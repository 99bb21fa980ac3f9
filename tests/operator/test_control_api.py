"""The control API over real HTTP in standalone (folder) mode, forwarding to a real-HTTP replica.

The store is a manifests folder (what `lorafleet up` watches); the replica is the gateway tests'
real-HTTP stand-in for an agent (tests/gateway/fake_replica.py), listed in the folder's
replicas file as the standalone supervisor writes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from openapi_spec_validator import validate

from lorafleet_core.api.adapter_manifest import build_adapter
from lorafleet_core.api.models import AdapterPhase
from lorafleet_core.api.names import KIND_ADAPTER, KIND_ALIAS
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_loadtest.probe.markers import adapter_markers
from lorafleet_operator.control.store import FolderStore
from lorafleet_standalone.reconciler import Reconciler
from tests.gateway.fake_replica import FakeReplica
from tests.gateway.servers import ServerThread
from tests.operator.control_support import (
    AGENT_TOKEN,
    AUTH,
    control_server,
    reasons_of,
    registration,
)
from tests.operator.factories import OTHER_HASH, pool_body

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def replica() -> Iterator[tuple[FakeReplica, str]]:
    fake = FakeReplica("pool-0")
    with ServerThread(fake.app()) as server:
        yield fake, server.url


@pytest.fixture
def folder(tmp_path: Path, replica: tuple[FakeReplica, str]) -> Path:
    pool = pool_body("pool", engine={"maxRank": 16})
    del pool["metadata"]["namespace"]
    write_object(tmp_path, pool)
    url = replica[1]
    (tmp_path / "replicas.yaml").write_text(
        yaml.safe_dump({"replicas": [{"id": "pool-0", "dataUrl": url, "internalUrl": url}]})
    )
    return tmp_path


@pytest.fixture
def api(folder: Path) -> Iterator[httpx.Client]:
    with (
        control_server(FolderStore(folder), replica_token=AGENT_TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        yield client


def adapters(folder: Path) -> dict[str, dict[str, Any]]:
    return {o.name: o.body for o in load_folder(folder).of_kind(KIND_ADAPTER)}


def test_register_writes_the_manifest_and_an_identical_repeat_is_idempotent(api, folder):
    resp = api.post("/internal/adapters", json=registration("acme-sup-v1"), headers=AUTH)
    assert resp.status_code == 201, resp.text
    stored = adapters(folder)["acme-sup-v1"]
    assert stored["spec"]["rank"] == 8
    assert stored["spec"]["tenant"] == "acme"
    assert stored["metadata"]["labels"]["lorafleet.dev/tenant"] == "acme"
    again = api.post("/internal/adapters", json=registration("acme-sup-v1"), headers=AUTH)
    assert again.status_code == 200
    assert again.json()["created"] is False


def test_a_named_registration_is_labelled_as_push_labels_it_and_the_canary_finds_it(api, folder):
    body = registration("acme-sup-v2", name="support")
    assert api.post("/internal/adapters", json=body, headers=AUTH).status_code == 201
    stored = adapters(folder)["acme-sup-v2"]
    assert stored["metadata"]["labels"]["lorafleet.dev/adapter-name"] == "support"
    assert adapter_markers(folder, {"support": "MARK-1"}) == {"acme-sup-v2": "MARK-1"}
    # The same fields through push's builder give the same object: one builder.
    spec = stored["spec"]
    pushed = build_adapter(
        object_name="acme-sup-v2",
        tenant="acme",
        version=spec["version"],
        adapter_name="support",
        base_hash=spec["baseModelHash"],
        rank=spec["rank"],
        alpha=spec["alpha"],
        target_modules=spec["targetModules"],
        weights_uri=spec["weightsUri"],
        checksum=spec["checksum"],
        size_bytes=None,
    )
    assert pushed.wire()["metadata"]["labels"] == stored["metadata"]["labels"]
    assert pushed.spec.wire() == stored["spec"]


def test_register_same_id_with_another_spec_is_409_and_keeps_the_stored_version(api, folder):
    assert api.post("/internal/adapters", json=registration("v1"), headers=AUTH).status_code == 201
    resp = api.post("/internal/adapters", json=registration("v1", rank=4), headers=AUTH)
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "adapter_conflict"
    assert resp.json()["error"]["type"] == "conflict_error"
    assert adapters(folder)["v1"]["spec"]["rank"] == 8


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"rank": 32}, ["RankTooHigh"]),
        ({"target_modules": ["q_proj", "lm_head"]}, ["TargetModulesNotAllowed"]),
        ({"base_model_hash": OTHER_HASH}, ["BaseModelMismatch"]),
        ({"weights_uri": "http://example.com/a/"}, ["spec.weightsUri"]),
        ({"checksum": "md5:abc"}, ["spec.checksum"]),
        ({"tenant": "Acme_Corp"}, ["spec.tenant"]),
        ({"rank": 0}, ["spec.rank"]),
        ({"alpha": -1}, ["spec.alpha"]),
        ({"target_modules": []}, ["spec.targetModules"]),
        ({"target_modules": ["q_proj", "q_proj"]}, ["Duplicate value"]),
        ({"adapter_id": "Not_A_Name"}, ["adapter_id"]),
        ({"rank": 64, "target_modules": ["q_proj", "lm_head"]}, ["RankTooHigh", "TargetModules"]),
        (
            {"checksum": "x", "weights_uri": "ftp://x", "rank": 0},
            ["checksum", "weightsUri", "rank"],
        ),
        ({"rank": "many"}, ["rank"]),
        ({"extra_field": 1}, ["extra_field"]),
        ({"name": "Support Bot"}, ["name"]),  # a label value the API server would refuse
    ],
)
def test_register_refuses_with_every_reason_and_writes_nothing(api, folder, over, expected):
    body = registration(**{"adapter_id": "bad-one", **over})
    resp = api.post("/internal/adapters", json=body, headers=AUTH)
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    reasons = reasons_of(resp)
    for word in expected:
        assert any(word in r for r in reasons), (word, reasons)
    assert len(reasons) >= len(expected)
    assert adapters(folder) == {}


def test_register_missing_field_names_it(api):
    body = registration("no-checksum")
    del body["checksum"]
    resp = api.post("/internal/adapters", json=body, headers=AUTH)
    assert resp.status_code == 422
    assert any("checksum" in r for r in reasons_of(resp))


@pytest.mark.parametrize(
    ("content", "status", "says"),
    [
        (b"[1, 2]", 422, "body: Input should be a valid dictionary"),
        (b'{"adapter_id": "\xff\xfe"}', 400, "error parsing the body"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "error parsing the body"),
        (json.dumps(registration("x-v1") | {"alpha": math.nan}).encode(), 422, "alpha: nan"),
    ],
    ids=["not-an-object", "bad-utf8", "nested-deep", "nan"],
)
def test_a_body_that_is_not_a_registration_is_refused_with_a_code(
    api, folder, content, status, says
):
    headers = {**AUTH, "content-type": "application/json"}
    resp = api.post("/internal/adapters", content=content, headers=headers)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] in {"invalid_request", "adapter_invalid"}
    assert says in error["message"]
    assert adapters(folder) == {}


def test_alias_deploy_then_rollback_by_pointing_back(api, folder):
    for v in ("sup-v1", "sup-v2"):
        api.post("/internal/adapters", json=registration(v), headers=AUTH).raise_for_status()
    first = api.put(
        "/internal/aliases/acme/support:prod", json={"adapter_id": "sup-v1"}, headers=AUTH
    )
    assert first.status_code == 200, first.text
    assert first.json()["previous_adapter_id"] is None
    deploy = api.put(
        "/internal/aliases/acme%2Fsupport:prod", json={"adapter_id": "sup-v2"}, headers=AUTH
    )
    assert deploy.json() | {} == {
        "alias": "acme/support:prod",
        "object_name": "acme-support-prod",
        "adapter_id": "sup-v2",
        "previous_adapter_id": "sup-v1",
    }
    back = api.put(
        "/internal/aliases/acme/support:prod", json={"adapter_id": "sup-v1"}, headers=AUTH
    )
    assert back.json()["previous_adapter_id"] == "sup-v2"
    aliases = load_folder(folder).of_kind(KIND_ALIAS)
    assert [(a.name, a.body["spec"]["adapter"]) for a in aliases] == [
        ("acme-support-prod", "sup-v1")
    ]


def test_alias_refuses_unknown_foreign_unservable_and_malformed(api, folder):
    api.post("/internal/adapters", json=registration("other-v1", tenant="other"), headers=AUTH)
    cases = [
        ("acme/support:prod", "missing", 404, "adapter_not_found"),
        ("acme/support:prod", "other-v1", 409, "alias_refused"),
        ("not a model", "other-v1", 422, "invalid_alias"),
    ]
    for alias, adapter, status, code in cases:
        resp = api.put(f"/internal/aliases/{alias}", json={"adapter_id": adapter}, headers=AUTH)
        assert (resp.status_code, resp.json()["error"]["code"]) == (status, code), resp.text
    # An adapter the pools reject (written around the API) cannot be deployed either.
    bad = registration("big-v1", rank=64)
    write_object(folder, _manifest(bad))
    resp = api.put("/internal/aliases/acme/big:prod", json={"adapter_id": "big-v1"}, headers=AUTH)
    assert resp.status_code == 409
    assert "RankTooHigh" in resp.json()["error"]["message"]
    assert load_folder(folder).of_kind(KIND_ALIAS) == []


def test_aliases_of_two_tenants_that_used_to_share_a_name_stay_apart(api, folder):
    api.post("/internal/adapters", json=registration("ab-v1", tenant="a-b"), headers=AUTH)
    api.post("/internal/adapters", json=registration("a-v1", tenant="a"), headers=AUTH)
    first = api.put("/internal/aliases/a-b/c:d", json={"adapter_id": "ab-v1"}, headers=AUTH)
    second = api.put("/internal/aliases/a/b-c:d", json={"adapter_id": "a-v1"}, headers=AUTH)
    assert (first.status_code, second.status_code) == (200, 200), second.text
    assert second.json()["previous_adapter_id"] is None
    assert first.json()["object_name"] != second.json()["object_name"]
    served = {
        a.body["spec"]["model"]: a.body["spec"]["adapter"]
        for a in load_folder(folder).of_kind(KIND_ALIAS)
    }
    assert served == {"a-b/c:d": "ab-v1", "a/b-c:d": "a-v1"}


def test_alias_name_held_by_another_model_is_refused_not_merged(api, folder):
    api.post("/internal/adapters", json=registration("a-v1", tenant="a"), headers=AUTH)
    held = {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "AdapterAlias",
        "metadata": {"name": "a-bc-d"},  # the name `a/bc:d` maps to
        "spec": {"model": "a/x:y", "tenant": "a", "adapter": "a-v1"},
    }
    write_object(folder, held)
    resp = api.put("/internal/aliases/a/bc:d", json={"adapter_id": "a-v1"}, headers=AUTH)
    assert resp.status_code == 409, resp.text
    error = resp.json()["error"]
    assert (error["code"], error["type"]) == ("alias_name_taken", "conflict_error")
    assert "already serves model 'a/x:y'" in error["message"]
    [alias] = load_folder(folder).of_kind(KIND_ALIAS)
    assert alias.body["spec"] == held["spec"]


def test_alias_refuses_a_version_the_replicas_refused_and_keeps_serving_the_last(
    api, folder, tmp_path
):
    """`lorafleet up`'s reconciler saw every owner refuse sup-v2's files (Failed): a PUT of
    it is 409 `alias_refused`, as on a cluster, and the alias file keeps naming sup-v1."""
    for v in ("sup-v1", "sup-v2"):
        api.post("/internal/adapters", json=registration(v), headers=AUTH).raise_for_status()
    put = {"headers": AUTH, "json": {"adapter_id": "sup-v1"}}
    api.put("/internal/aliases/acme/support:prod", **put).raise_for_status()
    rec = Reconciler(
        folder, {"pool-0": tmp_path / "ann"}, tmp_path / "reconcile.json", say=lambda _m: None
    )
    refused = {"sup-v2": "ChecksumMismatch: the files are not the ones published"}
    plan = rec.reconcile({"pool-0": ReplicaState(replica_id="pool-0", failed_adapters=refused)})
    assert plan.adapter_statuses["sup-v2"].phase == AdapterPhase.FAILED

    resp = api.put(
        "/internal/aliases/acme/support:prod", json={"adapter_id": "sup-v2"}, headers=AUTH
    )
    assert (resp.status_code, resp.json()["error"]["code"]) == (409, "alias_refused"), resp.text
    assert "Failed" in resp.json()["error"]["message"]
    aliases = load_folder(folder).of_kind(KIND_ALIAS)
    assert [a.body["spec"]["adapter"] for a in aliases] == ["sup-v1"]


def test_get_alias_says_a_deploy_is_past_its_progress_deadline_and_what_serves(
    api, folder, tmp_path
):
    """GET /internal/aliases/{model} reports the reconciler's view: the version asked for,
    the one still serving, and the Deployed reason (AwaitingReplicas, then
    ProgressDeadlineExceeded since when), until a replica verifies the new version."""
    for v in ("sup-v1", "sup-v2"):
        api.post("/internal/adapters", json=registration(v), headers=AUTH).raise_for_status()
    url = "/internal/aliases/acme/support:prod"
    api.put(url, json={"adapter_id": "sup-v1"}, headers=AUTH).raise_for_status()
    now = [datetime(2026, 12, 1, 9, 0, tzinfo=UTC)]
    rec = Reconciler(
        folder,
        {"pool-0": tmp_path / "ann"},
        tmp_path / "reconcile.json",
        say=lambda _m: None,
        clock=lambda: now[0],
    )
    holds_v1 = {"pool-0": ReplicaState(replica_id="pool-0", disk_adapters=["sup-v1"])}
    rec.reconcile(holds_v1)
    api.put(url, json={"adapter_id": "sup-v2"}, headers=AUTH).raise_for_status()
    [alias] = load_folder(folder).of_kind(KIND_ALIAS)
    write_object(
        folder, alias.body | {"spec": alias.body["spec"] | {"progressDeadlineSeconds": 30}}
    )
    rec.reconcile(holds_v1)
    waiting = api.get(url, headers=AUTH).json()
    assert waiting | {"message": ""} == {
        "alias": "acme/support:prod",
        "object_name": "acme-support-prod",
        "adapter_id": "sup-v2",
        "serving_adapter_id": "sup-v1",
        "previous_adapter_id": None,
        "deployed": False,
        "reason": "AwaitingReplicas",
        "message": "",
        "deploying_since": "2026-12-01T09:00:00Z",
        "progress_deadline_seconds": 30,
    }
    now[0] += timedelta(seconds=30)
    rec.reconcile(holds_v1)
    stalled = api.get(url, headers=AUTH).json()
    assert (stalled["reason"], stalled["serving_adapter_id"]) == (
        "ProgressDeadlineExceeded",
        "sup-v1",
    )
    assert "after 30 s" in stalled["message"]
    assert stalled["message"].endswith("still serving sup-v1")
    rec.reconcile({"pool-0": ReplicaState(replica_id="pool-0", disk_adapters=["sup-v1", "sup-v2"])})
    done = api.get(url, headers=AUTH).json()
    assert (done["deployed"], done["serving_adapter_id"], done["deploying_since"]) == (
        True,
        "sup-v2",
        None,
    )
    missing = api.get("/internal/aliases/acme/nope:prod", headers=AUTH)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "alias_not_found")
    assert api.get(url).status_code == 401


def _manifest(reg: dict[str, Any]) -> dict[str, Any]:
    from lorafleet_core.planning.adapter_registration import AdapterRegistration

    return AdapterRegistration.model_validate(reg).manifest()


def test_load_state_unload_are_forwarded_with_the_registry_record_and_credential(api, replica):
    fake, _url = replica
    api.post("/internal/adapters", json=registration("fwd-v1"), headers=AUTH).raise_for_status()
    resp = api.post("/internal/replicas/pool-0/adapters/fwd-v1/load", headers=AUTH)
    assert resp.status_code == 200, resp.text
    assert resp.json()["adapter_id"] == "fwd-v1"
    sent = fake.loads[-1]
    assert sent == AdapterRecord.model_validate(
        {**_record_fields(registration("fwd-v1")), "id": "fwd-v1"}
    )
    assert fake.load_headers[-1]["authorization"] == f"Bearer {AGENT_TOKEN}"
    state = api.get("/internal/replicas/pool-0/state", headers=AUTH)
    assert state.status_code == 200
    assert state.json()["replica_id"] == "pool-0"
    assert "fwd-v1" in state.json()["disk_adapters"]
    gone = api.post("/internal/replicas/pool-0/adapters/fwd-v1/unload", headers=AUTH)
    assert gone.status_code == 200
    assert fake.unloads[-1] == "fwd-v1"
    assert fake.load_headers[-1]["authorization"] == f"Bearer {AGENT_TOKEN}"


def _record_fields(reg: dict[str, Any]) -> dict[str, Any]:
    keep = ("tenant", "base_model_hash", "rank", "alpha", "target_modules", "weights_uri")
    return {k: reg[k] for k in keep} | {"checksum": reg["checksum"]}


def test_replica_errors_are_openai_shaped(api, replica):
    fake, _url = replica
    api.post("/internal/adapters", json=registration("err-v1"), headers=AUTH).raise_for_status()
    missing = api.post("/internal/replicas/pool-9/adapters/err-v1/load", headers=AUTH)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "no_replica")
    unknown = api.post("/internal/replicas/pool-0/adapters/nope/load", headers=AUTH)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "adapter_not_found")
    fake.reject_loads = True
    try:
        refused = api.post("/internal/replicas/pool-0/adapters/err-v1/load", headers=AUTH)
    finally:
        fake.reject_loads = False
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "adapter_rejected")


ROUTES = [
    ("POST", "/internal/adapters"),
    ("PUT", "/internal/aliases/acme/support:prod"),
    ("POST", "/internal/replicas/pool-0/adapters/a/load"),
    ("POST", "/internal/replicas/pool-0/adapters/a/unload"),
    ("GET", "/internal/replicas/pool-0/state"),
]


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer wrong"}, {"authorization": "Basic YWRtaW46YWRtaW4="}],
    ids=["none", "wrong-token", "not-bearer"],
)
def test_every_route_refuses_without_the_admin_credential(api, replica, headers):
    fake, _url = replica
    before = len(fake.load_headers)
    for method, path in ROUTES:
        resp = api.request(method, path, headers=headers, json=registration("x"))
        assert resp.status_code == 401, (method, path, resp.text)
        assert resp.json()["error"]["type"] == "authentication_error"
        assert resp.headers["www-authenticate"] == "Bearer"
    assert len(fake.load_headers) == before  # nothing reached the replica


def test_openapi_document_is_valid_and_lists_every_route(api):
    resp = api.get("/internal/openapi.json")
    assert resp.status_code == 200
    doc = resp.json()
    validate(doc)
    paths = set(doc["paths"])
    assert {
        "/internal/adapters",
        "/internal/aliases/{alias}",
        "/internal/replicas/{replica_id}/adapters/{adapter_id}/load",
        "/internal/replicas/{replica_id}/adapters/{adapter_id}/unload",
        "/internal/replicas/{replica_id}/state",
    } <= paths
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    body = doc["paths"]["/internal/adapters"]["post"]["requestBody"]
    schema_ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    required = set(doc["components"]["schemas"][schema_ref]["required"])
    assert {"adapter_id", "version", "base_model_hash", "rank", "alpha"} <= required
    assert {"target_modules", "weights_uri", "checksum"} <= required


def test_huge_target_modules_is_a_short_422_not_a_stall(api, folder):
    """20,000 modules (the CRD allows 32): refused with a bounded message (validation is linear
    and runs off the event loop; it took 2.9 s and quoted the whole list before)."""
    body = registration("huge-v1", target_modules=[f"m{i}" for i in range(20_000)])
    resp = api.post("/internal/adapters", json=body, headers=AUTH)
    assert resp.status_code == 422
    assert any("is too long" in r for r in reasons_of(resp))
    assert len(resp.content) < 4096
    assert "huge-v1" not in adapters(folder)


@pytest.mark.parametrize(
    "over",
    [{"rank": True}, {"rank": "8"}, {"alpha": "16"}, {"size_bytes": "10"}, {"version": 3}],
    ids=["rank-bool", "rank-string", "alpha-string", "size-string", "version-int"],
)
def test_registration_types_are_strict_as_the_crd(api, folder, over):
    resp = api.post("/internal/adapters", json=registration("typed-v1", **over), headers=AUTH)
    assert resp.status_code == 422, resp.text
    assert "typed-v1" not in adapters(folder)


def test_load_gpu_flag_is_strict(api):
    api.post("/internal/adapters", json=registration("gpu-v1"), headers=AUTH).raise_for_status()
    resp = api.post(
        "/internal/replicas/pool-0/adapters/gpu-v1/load", json={"gpu": "yes"}, headers=AUTH
    )
    assert (resp.status_code, resp.json()["error"]["code"]) == (422, "invalid_request")


def test_retry_without_size_or_with_reordered_modules_is_the_same_version(api, folder):
    first = registration("retry-v1", size_bytes=1234, target_modules=["q_proj", "v_proj"])
    assert api.post("/internal/adapters", json=first, headers=AUTH).status_code == 201
    for retry in (
        registration("retry-v1"),  # size_bytes left out
        registration("retry-v1", size_bytes=1234, target_modules=["v_proj", "q_proj"]),
    ):
        again = api.post("/internal/adapters", json=retry, headers=AUTH)
        assert (again.status_code, again.json()["created"]) == (200, False), again.text
    other = registration("retry-v1", size_bytes=999)
    assert api.post("/internal/adapters", json=other, headers=AUTH).status_code == 409
    assert adapters(folder)["retry-v1"]["spec"]["sizeBytes"] == 1234


def test_concurrent_puts_of_one_alias_see_one_creation(api, folder):
    api.post("/internal/adapters", json=registration("race-v1"), headers=AUTH).raise_for_status()

    def put(_: int) -> httpx.Response:
        client: httpx.Client = api
        return client.put(
            "/internal/aliases/acme/race:prod", json={"adapter_id": "race-v1"}, headers=AUTH
        )

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(put, range(20)))
    assert [a.status_code for a in answers] == [200] * 20
    previous = [a.json()["previous_adapter_id"] for a in answers]
    assert previous.count(None) == 1
    assert previous.count("race-v1") == 19


def test_longest_valid_adapter_id_is_created(api, folder):
    adapter_id = "a" * 245
    resp = api.post("/internal/adapters", json=registration(adapter_id), headers=AUTH)
    assert resp.status_code == 201, resp.text
    assert adapter_id in adapters(folder)
    again = api.post("/internal/adapters", json=registration(adapter_id), headers=AUTH)
    assert again.status_code == 200
