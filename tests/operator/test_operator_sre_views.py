"""What an SRE sees of a failed deploy, on statuses the real operator wrote (kopf against kmock):
`kubectl get loraadapters,adapteraliases,replicapools -o wide` rows (the CRDs' printer columns
evaluated as the API server's table convertor does) and the Warning Events, for every failure
mode at once in one namespace.

Each failing row must say False in Ready, the cause in Reason (not the phase again) and what to
do in Message; each failure must leave a Warning Event with the same reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.test_printer_columns import table_row
from tests.operator.factories import adapter_body, alias_body
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_fleet import ENV, make_pool, status
from tests.operator.kopf_harness import module_fixtures

pytestmark = pytest.mark.timeout(180)

cluster, operator = module_fixtures("srev", ENV)

BASE = "sha256:" + "5" * 64
BARE = "sha256:" + "6" * 64  # the base model of a pool that lists no adapterSources
FAST = {"autoscaling": {"enabled": False, "pollIntervalSeconds": 0.5}}

# object -> (Reason column, a fragment of the Message column), for every failure mode.
ADAPTERS = {
    "sre-big": ("RankTooHigh", "maxRank"),
    "sre-alien": ("BaseModelMismatch", "matches no ReplicaPool"),
    "sre-theft": ("WeightsOutsideSources", "adapterSources"),
    "sre-held": ("NoAdapterSources", "sets no spec.adapterSources"),
    "sre-corrupt": ("ReplicaRejected", "ChecksumMismatch"),
}
ALIASES = {
    "sre-to-big": ("AdapterNotReady", "sre-big"),
    "sre-to-nothing": ("AdapterNotFound", "sre-gone"),
    "sre-second-claim": ("ModelClaimed", "sre-first-claim"),
}


def row(cluster: Cluster, plural: str, name: str) -> dict[str, str]:
    obj = cluster.get(cluster.path(plural, name))
    assert obj is not None, name
    return table_row(obj, wide=True)


def warnings(cluster: Cluster) -> set[tuple[str, str]]:
    return {
        ((e.get("involvedObject") or {}).get("name", ""), e.get("reason", ""))
        for e in cluster.items(cluster.path("events", group="v1"))
        if e.get("type") == "Warning"
    }


def add(cluster: Cluster, plural: str, body: dict[str, Any]) -> None:
    body["metadata"].pop("namespace", None)
    body["metadata"].pop("creationTimestamp", None)
    cluster.create(cluster.path(plural), body)


@pytest.fixture(scope="module")
def failed_deploy(cluster: Cluster, operator: Any) -> Any:
    servers = make_pool(cluster, "sre", 1, base_hash=BASE, engine={"maxRank": 16}, **FAST)
    bare = make_pool(cluster, "sre-bare", 1, base_hash=BARE, adapterSources=[], **FAST)
    # A pool whose engine would open vLLM: refused as a whole.
    make_pool(cluster, "sre-open", 0, base_hash=BASE, engine={"extraArgs": ["--host=0.0.0.0"]})
    servers[0].set_load(failed_adapters={"sre-corrupt": "ChecksumMismatch: files hash to x"})
    add(cluster, "loraadapters", adapter_body("sre-ok", base_hash=BASE))
    add(cluster, "loraadapters", adapter_body("sre-big", base_hash=BASE, rank=64))
    add(cluster, "loraadapters", adapter_body("sre-alien", base_hash="sha256:" + "7" * 64))
    theft = adapter_body("sre-theft", base_hash=BASE, weightsUri="s3://adapters/globex/x/")
    add(cluster, "loraadapters", theft)
    add(cluster, "loraadapters", adapter_body("sre-held", base_hash=BARE))
    add(cluster, "loraadapters", adapter_body("sre-corrupt", base_hash=BASE))
    add(cluster, "adapteraliases", alias_body("sre-to-big", "acme/big:prod", "sre-big"))
    add(cluster, "adapteraliases", alias_body("sre-to-nothing", "acme/none:prod", "sre-gone"))
    add(cluster, "adapteraliases", alias_body("sre-first-claim", "acme/ok:prod", "sre-ok"))
    eventually(lambda: status(cluster, "adapteraliases", "sre-first-claim").get("adapter"))
    add(cluster, "adapteraliases", alias_body("sre-second-claim", "acme/ok:prod", "sre-ok"))
    yield
    for s in servers + bare:
        s.close()


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_each_failed_adapter_row_says_why_and_leaves_a_warning(cluster, failed_deploy, name):
    reason, says = ADAPTERS[name]
    got = eventually(
        lambda: (r := row(cluster, "loraadapters", name))["Reason"] == reason and r,
        what=f"{name} Ready=False/{reason}",
    )
    assert got["Ready"] == "False"
    assert says in got["Message"], got
    assert got["Phase"] in ("Rejected", "Failed", "Pending")
    eventually(lambda: (name, reason) in warnings(cluster), what=f"Warning {reason} on {name}")


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_each_refused_alias_row_says_why_and_leaves_a_warning(cluster, failed_deploy, name):
    reason, says = ALIASES[name]
    got = eventually(
        lambda: (r := row(cluster, "adapteraliases", name))["Reason"] == reason and r,
        what=f"{name} Ready=False/{reason}",
    )
    assert got["Ready"] == "False"
    assert says in got["Message"], got
    eventually(lambda: (name, reason) in warnings(cluster), what=f"Warning {reason} on {name}")


def test_the_refused_pool_row_names_the_flag_and_the_good_rows_stay_ready(cluster, failed_deploy):
    pool = eventually(
        lambda: (r := row(cluster, "replicapools", "sre-open"))["Reason"] == "InvalidSpec" and r
    )
    assert pool["Ready"] == "False"
    assert "--host" in pool["Message"]
    eventually(lambda: ("sre-open", "InvalidSpec") in warnings(cluster), what="pool Warning")
    ok = eventually(lambda: (r := row(cluster, "loraadapters", "sre-ok"))["Ready"] == "True" and r)
    assert ok["Phase"] == "Ready"
    first = row(cluster, "adapteraliases", "sre-first-claim")
    assert first["Ready"] == "True"
