"""The kmock harness behaves as the API server does where kmock alone does not
(tests/operator/kmock_cluster.py): `?watch=` read as a boolean, resourceVersion preconditions,
label selectors on lists and watches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

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


# Pods by name -> labels, for the selector tables below.
LABELLED = {
    "p-web": {"app": "web", "tier": "front"},
    "p-db": {"app": "db", "tier": "back"},
    "p-none": {},
    "p-cache": {"app": "cache"},
}
# (labelSelector, the pods it selects, labels of a pod it selects, of one it does not or None)
SELECTORS: list[tuple[str, set[str], dict[str, str], dict[str, str] | None]] = [
    ("app=web", {"p-web"}, {"app": "web"}, {"app": "db"}),
    ("app==db", {"p-db"}, {"app": "db"}, {"app": "web"}),
    ("app!=web", {"p-db", "p-none", "p-cache"}, {}, {"app": "web"}),
    ("tier", {"p-web", "p-db"}, {"tier": "x"}, {}),
    ("!tier", {"p-none", "p-cache"}, {}, {"tier": "x"}),
    ("app in (web, cache)", {"p-web", "p-cache"}, {"app": "cache"}, {"app": "db"}),
    ("app notin (web,cache)", {"p-db", "p-none"}, {}, {"app": "web"}),
    ("app,tier=back", {"p-db"}, {"app": "x", "tier": "back"}, {"tier": "back"}),
    ("app!=db,tier", {"p-web"}, {"tier": "y"}, {"app": "db", "tier": "y"}),  # comma is AND
    ("", set(LABELLED), {}, None),
]
MALFORMED = ["app in ()", "app=web=db", "app in web", "app web", "app,", "=web", "-app=web"]


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"containers": []}}


@pytest.fixture
def labelled(cluster: Cluster) -> Cluster:
    for name, labels in LABELLED.items():
        cluster.create(cluster.path("pods", group="v1"), _pod(name, labels))
    return cluster


def _events(resp: httpx.Response) -> Iterator[tuple[str, str]]:
    for line in resp.iter_lines():
        if line.strip():
            event = json.loads(line)
            yield event["type"], event["object"]["metadata"]["name"]


@pytest.mark.parametrize(("selector", "selected", "hit", "miss"), SELECTORS)
def test_a_list_returns_only_what_the_label_selector_selects(
    labelled: Cluster,
    selector: str,
    selected: set[str],
    hit: dict[str, str],
    miss: dict[str, str] | None,
):
    r = labelled.http.get(labelled.path("pods", group="v1"), params={"labelSelector": selector})
    assert r.status_code == 200, r.text
    assert {i["metadata"]["name"] for i in r.json()["items"]} == selected


@pytest.mark.parametrize(("selector", "selected", "hit", "miss"), SELECTORS)
def test_a_watch_delivers_only_events_of_what_the_label_selector_selects(
    labelled: Cluster,
    selector: str,
    selected: set[str],
    hit: dict[str, str],
    miss: dict[str, str] | None,
):
    """The initial events are the selected objects; a later object the selector does not
    select sends no event, so the next one delivered is the selected object created after it."""
    url = f"{labelled.url}{labelled.path('pods', group='v1')}"
    params = {"watch": "true", "labelSelector": selector}
    with httpx.Client(timeout=10) as http, http.stream("GET", url, params=params) as resp:
        assert resp.status_code == 200
        events = _events(resp)
        initial = {next(events) for _ in selected}
        assert initial == {("ADDED", name) for name in selected}
        if miss is not None:
            labelled.create(labelled.path("pods", group="v1"), _pod("late-miss", miss))
        labelled.create(labelled.path("pods", group="v1"), _pod("late-hit", hit))
        assert next(events) == ("ADDED", "late-hit")


def test_an_object_leaving_and_entering_the_selection_is_deleted_and_added(labelled: Cluster):
    """As the API server's watch cache does: a watcher of `app=web` sees a relabelled pod go
    (DELETED) and come back (ADDED), and nothing of its changes while it is not selected."""
    url = f"{labelled.url}{labelled.path('pods', group='v1')}"
    pod = labelled.path("pods", "p-web", group="v1")
    params = {"watch": "true", "labelSelector": "app=web"}
    with httpx.Client(timeout=10) as http, http.stream("GET", url, params=params) as resp:
        events = _events(resp)
        assert next(events) == ("ADDED", "p-web")
        labelled.patch(pod, {"metadata": {"labels": {"app": "db"}}})
        assert next(events) == ("DELETED", "p-web")
        labelled.patch(pod, {"metadata": {"labels": {"tier": "back"}}})  # still not selected
        labelled.patch(pod, {"metadata": {"labels": {"app": "web"}}})
        assert next(events) == ("ADDED", "p-web")
        labelled.patch(pod, {"metadata": {"labels": {"tier": "front"}}})
        assert next(events) == ("MODIFIED", "p-web")
        labelled.delete(pod)
        assert next(events) == ("DELETED", "p-web")


@pytest.mark.parametrize("selector", MALFORMED)
@pytest.mark.parametrize("watch", [False, True])
def test_a_malformed_label_selector_is_refused_with_400(
    labelled: Cluster, selector: str, watch: bool
):
    params = {"labelSelector": selector, **({"watch": "true"} if watch else {})}
    r = labelled.http.get(labelled.path("pods", group="v1"), params=params)
    assert r.status_code == 400, r.text
    assert (r.json()["kind"], r.json()["reason"]) == ("Status", "BadRequest")
