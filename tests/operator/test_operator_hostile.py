"""Hostile and careless input to the kopf operator against kmock: what users do, not what the
schema allows. kmock has no schema validation and no CEL, as a CRD installed without them
would not, so the operator itself must say what is wrong, in status conditions, without
holding up anyone else in the namespace.

One operator run for the module; each test uses its own base-model hash, so adapters only
ever match the pools of their own test.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.operator.factories import adapter_body, alias_body, pool_body
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_fleet import ENV, cond, make_pool, status
from tests.operator.kopf_harness import module_fixtures

pytestmark = pytest.mark.timeout(180)


cluster, operator = module_fixtures("hostile", ENV)


def h(c: str) -> str:
    return "sha256:" + c * 64


def add_adapter(cluster: Cluster, name: str, base: str, **kw: Any) -> None:
    body = adapter_body(name, base_hash=base, **kw)
    del body["metadata"]["namespace"]
    cluster.create(cluster.path("loraadapters"), body)


def add_alias(cluster: Cluster, name: str, model: str, target: str, **spec: Any) -> str:
    body = alias_body(name, model, target)
    del body["metadata"]["namespace"], body["metadata"]["creationTimestamp"]
    body["spec"].update(spec)
    cluster.create(cluster.path("adapteraliases"), body)
    return cluster.path("adapteraliases", name)


def alias_ready(cluster: Cluster, name: str) -> dict[str, Any]:
    return cond(status(cluster, "adapteraliases", name), "Ready")


def warnings_for(cluster: Cluster, name: str) -> list[tuple[str, str]]:
    return [
        (e.get("type", ""), e.get("reason", ""))
        for e in cluster.items(cluster.path("events", group="v1"))
        if (e.get("involvedObject") or {}).get("name") == name and e.get("type") == "Warning"
    ]


def phase(cluster: Cluster, name: str) -> str | None:
    out: str | None = status(cluster, "loraadapters", name).get("phase")
    return out


def test_aliases_with_bad_specs_get_a_status_saying_why(cluster, operator):
    servers = make_pool(cluster, "bad-alias", 1, base_hash=h("1"))
    try:
        add_adapter(cluster, "ba-v1", h("1"))
        eventually(lambda: phase(cluster, "ba-v1") == "Ready")
        # Another tenant's model name, an unknown field, no adapter at all.
        add_alias(cluster, "ba-foreign", "globex/support:prod", "ba-v1")
        add_alias(cluster, "ba-unknown", "acme/ba:u", "ba-v1", replicas=3)
        missing = add_alias(cluster, "ba-missing", "acme/ba:m", "ba-v1")
        cluster.patch(missing, {"spec": {"adapter": None}})
        # A 1 MB label is not the operator's business: served like any other alias.
        big = alias_body("ba-big-label", "acme/ba:big", "ba-v1")
        del big["metadata"]["namespace"], big["metadata"]["creationTimestamp"]
        big["metadata"]["labels"] = {"note": "é" * 500_000}
        cluster.create(cluster.path("adapteraliases"), big)

        for name, field in [
            ("ba-foreign", "spec"),
            ("ba-unknown", "spec.replicas"),
            ("ba-missing", "spec.adapter"),
        ]:
            ready = eventually(lambda n=name: alias_ready(cluster, n), what=f"{name} status")
            assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec"), ready
            assert field in ready["message"], ready
            deployed = cond(status(cluster, "adapteraliases", name), "Deployed")
            assert deployed["reason"] == "InvalidSpec"
        assert "tenant" in alias_ready(cluster, "ba-foreign")["message"]
        assert ("Warning", "InvalidSpec") in eventually(lambda: warnings_for(cluster, "ba-unknown"))
        eventually(lambda: alias_ready(cluster, "ba-big-label").get("status") == "True")

        # Fixed: it deploys like any alias.
        cluster.patch(missing, {"spec": {"adapter": "ba-v1"}})
        served = eventually(lambda: status(cluster, "adapteraliases", "ba-missing").get("adapter"))
        assert served == "ba-v1"
        assert alias_ready(cluster, "ba-missing")["status"] == "True"
    finally:
        for s in servers:
            s.close()


def test_adapters_applied_before_their_pool_turn_ready_when_it_appears(cluster, operator):
    """`kubectl apply -f DIR` creates loraadapter-* before replicapool-*; with another base
    model's pool already in the namespace the adapters are refused at first, then served."""
    servers = make_pool(cluster, "early-other", 1, base_hash=h("2"))
    try:
        add_adapter(cluster, "early-a", h("3"))
        eventually(lambda: phase(cluster, "early-a") == "Rejected")
        assert ("Warning", "BaseModelMismatch") in eventually(
            lambda: warnings_for(cluster, "early-a")
        )
        assert cond(status(cluster, "loraadapters", "early-a"), "Validated")["reason"] == (
            "BaseModelMismatch"
        )
        servers += make_pool(cluster, "early-own", 1, base_hash=h("3"))
        eventually(lambda: phase(cluster, "early-a") == "Ready", within_s=20)
        st = status(cluster, "loraadapters", "early-a")
        assert st["owners"] == ["early-own-0"]
    finally:
        for s in servers:
            s.close()


def test_pool_deleted_mid_rollout_then_recreated(cluster, operator):
    servers = make_pool(cluster, "gone", 1, base_hash=h("4"))
    try:
        add_adapter(cluster, "gone-v1", h("4"))
        eventually(lambda: phase(cluster, "gone-v1") == "Ready")
        path = add_alias(cluster, "gone-prod", "acme/gone:prod", "gone-v1")
        eventually(lambda: alias_ready(cluster, "gone-prod").get("status") == "True")
        add_adapter(cluster, "gone-v2", h("4"))
        servers[0].state["disk_adapters"] = ["gone-v1", "gone-v2"]  # its agent verified both
        cluster.patch(path, {"spec": {"adapter": "gone-v2"}})  # the rollout ...
        cluster.delete(cluster.path("replicapools", "gone"))  # ... and the pool goes
        # Pending with no pool left, Rejected (for now) beside other tests' pools.
        eventually(lambda: phase(cluster, "gone-v1") in {"Pending", "Rejected"}, within_s=20)
        ready = eventually(
            lambda: (r := alias_ready(cluster, "gone-prod")).get("status") == "False" and r
        )
        # What it serves is no longer servable, and it says so (the gateway drops it too).
        assert ready["reason"] == "AdapterNotReady", ready
        assert "gone-v" in ready["message"]
        body = pool_body("gone", base_hash=h("4"))  # recreated; its pod is still there
        del body["metadata"]["namespace"]
        cluster.create(cluster.path("replicapools"), body)
        eventually(
            lambda: status(cluster, "adapteraliases", "gone-prod").get("adapter") == "gone-v2",
            within_s=20,
        )
        assert alias_ready(cluster, "gone-prod")["status"] == "True"
    finally:
        for s in servers:
            s.close()


def test_alias_whose_adapter_vanished_is_not_ready(cluster, operator):
    """The adapter removed behind the operator's back (its finalizer deleted by hand)."""
    servers = make_pool(cluster, "vanish", 1, base_hash=h("5"))
    try:
        add_adapter(cluster, "vanish-v1", h("5"))
        eventually(lambda: phase(cluster, "vanish-v1") == "Ready")
        add_alias(cluster, "vanish-prod", "acme/vanish:prod", "vanish-v1")
        eventually(lambda: alias_ready(cluster, "vanish-prod").get("status") == "True")
        path = cluster.path("loraadapters", "vanish-v1")
        cluster.delete(path)
        eventually(lambda: cond(status(cluster, "loraadapters", "vanish-v1"), "DeletionBlocked"))
        cluster.patch(path, {"metadata": {"finalizers": []}})
        eventually(lambda: cluster.get(path) is None)
        ready = eventually(
            lambda: (r := alias_ready(cluster, "vanish-prod")).get("status") == "False" and r
        )
        assert ready["reason"] == "AdapterNotFound"
        assert "vanish-v1" in ready["message"]
        # `kubectl describe alias vanish-prod` lists it under Events, as a Warning. An
        # AdapterDeleting warning from the blocked deletion may come first: wait for ours.
        warning = eventually(
            lambda: (
                ("Warning", "AdapterNotFound") in (w := warnings_for(cluster, "vanish-prod")) and w
            )
        )
        assert ("Warning", "AdapterNotFound") in warning, warning
    finally:
        for s in servers:
            s.close()


def test_one_tenants_hostile_aliases_do_not_stall_the_namespace(cluster, operator):
    """135 aliases with 250-character names block one deletion: a DeletionBlocked message
    longer than a condition may be. The namespace's plan still runs for another tenant."""
    servers = make_pool(cluster, "crowd", 1, base_hash=h("6"))
    try:
        add_adapter(cluster, "crowd-v1", h("6"))
        eventually(lambda: phase(cluster, "crowd-v1") == "Ready")
        for i in range(135):
            add_alias(cluster, "c" * 246 + f"{i:04d}", f"acme/crowd{i}:prod", "crowd-v1")
        cluster.delete(cluster.path("loraadapters", "crowd-v1"))
        blocked = eventually(
            lambda: cond(status(cluster, "loraadapters", "crowd-v1"), "DeletionBlocked"),
            within_s=30,
        )
        assert blocked["message"].endswith("(truncated)")
        add_adapter(cluster, "crowd-globex", h("6"), tenant="globex")
        eventually(lambda: phase(cluster, "crowd-globex") == "Ready", within_s=20)
    finally:
        for s in servers:
            s.close()


def test_pool_with_min_above_max_says_so(cluster, operator):
    servers = make_pool(cluster, "minmax", 0, base_hash=h("7"), replicas={"min": 5, "max": 2})
    try:
        ready = eventually(lambda: cond(status(cluster, "replicapools", "minmax"), "Ready"))
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
        assert "replicas.min (5) must be <= replicas.max (2)" in ready["message"], ready
    finally:
        for s in servers:
            s.close()


@pytest.mark.parametrize(
    ("name", "engine", "says"),
    [
        ("open", {"extraArgs": ["--hos", "0.0.0.0"]}, "sets vLLM's --host"),  # noqa: S104
        ("inject", {"extraArgs": ["--lora-modules", "x=/tmp/x"]}, "--lora-modules"),
        ("p" * 53, {}, "at most 52 characters"),
    ],
)
def test_pool_whose_engine_or_name_cannot_run_safely_gets_no_statefulset(
    cluster, operator, name, engine, says
):
    make_pool(cluster, name, 0, base_hash=h("b"), engine=engine)
    ready = eventually(lambda: cond(status(cluster, "replicapools", name), "Ready"))
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert says in ready["message"], ready
    assert cluster.get(cluster.path("statefulsets", name, group="apps/v1")) is None


def test_adapters_outside_the_pools_sources_are_rejected(cluster, operator):
    source = "s3://fleet-adapters/lorafleet/"
    servers = make_pool(cluster, "src", 1, base_hash=h("8"), adapterSources=[source])
    try:
        add_adapter(cluster, "src-own", h("8"), weightsUri=f"{source}acme/support/v1/")
        add_adapter(cluster, "src-theft", h("8"), weightsUri=f"{source}globex/secret/v1/")
        add_adapter(cluster, "src-local", h("8"), weightsUri="file:///var/run/secrets/")
        eventually(lambda: phase(cluster, "src-own") == "Ready")
        for name in ("src-theft", "src-local"):
            eventually(lambda n=name: phase(cluster, n) == "Rejected")
            v = cond(status(cluster, "loraadapters", name), "Validated")
            assert v["reason"] == "WeightsOutsideSources", v
            assert all(name not in owned_ids for owned_ids in _owned_everywhere(cluster))
    finally:
        for s in servers:
            s.close()


def _owned_everywhere(cluster: Cluster) -> list[set[str]]:
    from tests.operator.kopf_fleet import owned

    pods = cluster.items(cluster.path("pods", group="v1"))
    return [owned(cluster, p["metadata"]["name"]) for p in pods]


def test_an_alias_flipped_back_and_forth_settles_on_the_last_spec_without_a_storm(
    cluster, operator
):
    servers = make_pool(cluster, "flip", 1, base_hash=h("9"))
    try:
        for n in ("flip-v1", "flip-v2"):
            add_adapter(cluster, n, h("9"))
        eventually(lambda: phase(cluster, "flip-v1") == "Ready" == phase(cluster, "flip-v2"))
        servers[0].state["disk_adapters"] = ["flip-v1", "flip-v2"]  # its agent verified both
        path = add_alias(cluster, "flip-prod", "acme/flip:prod", "flip-v1")
        eventually(lambda: status(cluster, "adapteraliases", "flip-prod").get("adapter"))
        before = cluster.writes_by_name("adapteraliases").get("flip-prod", 0)
        for i in range(20):
            cluster.patch(path, {"spec": {"adapter": f"flip-v{1 + (i + 1) % 2}"}})
        # 20 edits end on flip-v1 (i = 19): what is served follows the last one.
        cluster.patch(path, {"spec": {"adapter": "flip-v2"}})
        eventually(
            lambda: status(cluster, "adapteraliases", "flip-prod").get("adapter") == "flip-v2"
        )
        st = status(cluster, "adapteraliases", "flip-prod")
        assert len(st["history"]) <= 10
        # The sync loop coalesces: far fewer status writes than edits (the test's own 21
        # spec patches are counted too).
        written = cluster.writes_by_name("adapteraliases")["flip-prod"] - before
        assert written <= 21 + 4, written  # measured: 21 + 1
    finally:
        for s in servers:
            s.close()
