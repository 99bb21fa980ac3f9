"""The kmock harness reads `?watch=` as the API server does (tests/operator/kmock_cluster.py)."""

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
