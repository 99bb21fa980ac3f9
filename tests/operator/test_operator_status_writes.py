"""Someone else writing a lorafleet status (a user granted `*/status`, a stale controller): the
operator is the one writer, so what it sees on the object that is not its plan is written back
on the next pass, and what the gateway serves follows the operator's verdict again.

The gateway trusts `status.phase` of a LoRAAdapter and `status.adapter` of an alias (it checks
the alias's tenant against the adapter's itself, tests/gateway/test_gateway_catalog.py), so a
status write is a way past validation for as long as it stands.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.operator.factories import adapter_body, alias_body
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_fleet import ENV, cond, make_pool, status
from tests.operator.kopf_harness import module_fixtures

pytestmark = pytest.mark.timeout(180)

cluster, operator = module_fixtures("stw", ENV)

BASE = "sha256:" + "4" * 64


def add(cluster: Cluster, plural: str, body: dict[str, Any]) -> None:
    body["metadata"].pop("namespace", None)
    body["metadata"].pop("creationTimestamp", None)
    cluster.create(cluster.path(plural), body)


def write_status(cluster: Cluster, plural: str, name: str, value: dict[str, Any]) -> None:
    cluster.patch(cluster.path(plural, name) + "/status", {"status": value})


def test_a_rejected_adapter_marked_ready_by_hand_is_rejected_again(cluster, operator):
    servers = make_pool(cluster, "stw", 1, base_hash=BASE)
    try:
        add(cluster, "loraadapters", adapter_body("stw-big", base_hash=BASE, rank=64))
        eventually(lambda: status(cluster, "loraadapters", "stw-big").get("phase") == "Rejected")
        forged = {
            "phase": "Ready",
            "owners": ["stw-0"],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Servable"}],
        }
        write_status(cluster, "loraadapters", "stw-big", forged)
        eventually(
            lambda: status(cluster, "loraadapters", "stw-big").get("phase") == "Rejected",
            what="the operator's verdict written back",
        )
        st = status(cluster, "loraadapters", "stw-big")
        assert cond(st, "Ready")["status"] == "False"
        assert st.get("owners") in (None, [])
    finally:
        for s in servers:
            s.close()


def test_an_alias_pointed_at_another_tenants_adapter_by_status_is_put_back(cluster, operator):
    servers = make_pool(cluster, "stw2", 1, base_hash="sha256:" + "3" * 64)
    try:
        base = "sha256:" + "3" * 64
        add(cluster, "loraadapters", adapter_body("stw-acme", base_hash=base))
        add(cluster, "loraadapters", adapter_body("stw-globex", base_hash=base, tenant="globex"))
        add(cluster, "adapteraliases", alias_body("stw-prod", "acme/stw:prod", "stw-acme"))
        eventually(lambda: status(cluster, "adapteraliases", "stw-prod").get("adapter"))
        served = status(cluster, "adapteraliases", "stw-prod")
        write_status(cluster, "adapteraliases", "stw-prod", {**served, "adapter": "stw-globex"})
        eventually(
            lambda: status(cluster, "adapteraliases", "stw-prod").get("adapter") == "stw-acme",
            what="status.adapter written back",
        )
    finally:
        for s in servers:
            s.close()
