"""The kmock harness behaves as the API server does where kmock alone does not
(tests/operator/kmock_cluster.py): `?watch=` read as a boolean, resourceVersion preconditions."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.operator.kmock_cluster import Cluster, watching


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster("lf")
    try:
        yield c
    finally:
        c.close()


@pytest.mark.parametrize(
    ("query", "watch"),
    [
        ({"watch": "true"}, True),
        ({"watch": "True"}, True),  # kubernetes_asyncio's spelling
        ({"watch": "1"}, True),
        ({"watch": ""}, True),  # the API server: only absent, `0` or `false` mean no watch
        ({"watch": "false"}, False),
        ({"watch": "False"}, False),
        ({"watch": "0"}, False),
        ({}, False),
    ],
)
def test_watch_is_read_as_the_api_server_reads_a_boolean(query: dict[str, str], watch: bool):
    assert watching(query) is watch


def test_a_watch_spelled_true_streams_events_and_is_not_held_as_a_slow_list(cluster: Cluster):
    """`?watch=True` is a watch: it streams the objects as events at once, and the delay meant
    for plain lists does not hold it (kmock alone answered it with a list, after the delay)."""
    cluster.emulator.list_delay_s = {"adapteraliases": 30.0}
    cluster.create(cluster.path("adapteraliases"), {"metadata": {"name": "a"}, "spec": {}})
    url = f"{cluster.url}{cluster.path('adapteraliases')}"
    with (
        httpx.Client(timeout=5) as http,
        http.stream("GET", url, params={"watch": "True"}) as resp,
    ):
        first = next(line for line in resp.iter_lines() if line.strip())
    event = json.loads(first)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "a")


def _patch(cluster: Cluster, path: str, body: object, content_type: str) -> httpx.Response:
    return cluster.http.patch(
        path, content=json.dumps(body), headers={"Content-Type": content_type}
    )


def test_every_write_gives_a_new_resource_version_and_a_stale_one_is_refused(cluster: Cluster):
    """Optimistic concurrency as the API server does it: each create and patch gives the object
    a new resourceVersion; a merge patch naming an older one is refused with 409 Conflict and
    changes nothing; one naming the current one, or none, is applied."""
    path = cluster.path("adapteraliases", "rv")
    created = cluster.create(
        cluster.path("adapteraliases"), {"metadata": {"name": "rv"}, "spec": {}}
    )
    first = created["metadata"]["resourceVersion"]
    second = cluster.patch(path, {"spec": {"adapter": "a"}})["metadata"]["resourceVersion"]
    assert second != first
    merge = "application/merge-patch+json"
    stale = _patch(
        cluster, path, {"metadata": {"resourceVersion": first}, "spec": {"adapter": "b"}}, merge
    )
    assert stale.status_code == 409, stale.text
    assert (stale.json()["kind"], stale.json()["code"]) == ("Status", 409)
    assert "the object has been modified" in stale.json()["message"]
    after = cluster.get(path)
    assert after is not None
    assert (after["spec"], after["metadata"]["resourceVersion"]) == ({"adapter": "a"}, second)
    fresh = _patch(
        cluster, path, {"metadata": {"resourceVersion": second}, "spec": {"adapter": "c"}}, merge
    )
    assert fresh.status_code == 200, fresh.text
    assert fresh.json()["spec"] == {"adapter": "c"}
    assert fresh.json()["metadata"]["resourceVersion"] not in (first, second)
    status = cluster.patch(path + "/status", {"status": {"adapter": "c"}})  # a subresource too
    assert status["metadata"]["resourceVersion"] != fresh.json()["metadata"]["resourceVersion"]


def test_a_json_patch_testing_a_stale_resource_version_is_refused_with_422(cluster: Cluster):
    """kopf guards its finalizer patches with a JSON patch `test` of the resourceVersion and
    retries on the API server's 422; kmock alone answered 500."""
    created = cluster.create(
        cluster.path("adapteraliases"), {"metadata": {"name": "jp"}, "spec": {}}
    )
    path = cluster.path("adapteraliases", "jp")
    version = created["metadata"]["resourceVersion"]
    cluster.patch(path, {"spec": {"adapter": "a"}})
    add = {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": version}
    refused = _patch(cluster, path, [test, add], "application/json-patch+json")
    assert refused.status_code == 422, refused.text
    current = cluster.get(path)
    assert current is not None
    assert "finalizers" not in current["metadata"]
    test["value"] = current["metadata"]["resourceVersion"]
    applied = _patch(cluster, path, [test, add], "application/json-patch+json")
    assert applied.status_code == 200, applied.text
    assert applied.json()["metadata"]["finalizers"] == ["x"]
    assert applied.json()["metadata"]["resourceVersion"] != test["value"]
