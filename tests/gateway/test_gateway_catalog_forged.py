"""A LoRAAdapter Ready by a status someone other than the operator wrote (a user granted
`*/status`): the gateway serves no adapter whose weights lie where no pool takes them from
(adapterSources), whatever its status says. The operator writes its own verdict back within a
pass (tests/operator/test_operator_status_writes.py); this closes the window meanwhile.
"""

from __future__ import annotations

from typing import Any

import pytest

from lorafleet_gateway.catalog import CatalogSnapshot, ReplicaEndpoint
from lorafleet_gateway.catalog_build import build_snapshot
from tests.gateway import manifests as m

READY = {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}


def adapter_at(name: str, uri: str) -> dict[str, Any]:
    obj = m.adapter(name, "acme", status=READY)
    obj["spec"]["weightsUri"] = uri
    return obj


def build(pools: list[dict[str, Any]], *, allow_missing_status: bool) -> CatalogSnapshot:
    adapters = [
        m.adapter("acme-own", "acme", status=READY),
        adapter_at("acme-theft", f"{m.ADAPTER_SOURCE}globex/secret/v1/"),
        adapter_at("acme-local", "file:///var/run/secrets/kubernetes.io/serviceaccount/"),
    ]
    served = {"adapter": "acme-theft", "conditions": [{"type": "Ready", "status": "True"}]}
    aliases = [m.alias("acme/x:prod", "acme-theft", status=served)]
    return build_snapshot(
        adapters=adapters,
        aliases=aliases,
        secrets=[],
        pools=pools,
        replicas=[ReplicaEndpoint("r-0", "http://r-0", "http://r-0", "default")],
        allow_missing_status=allow_missing_status,
        version=1,
    )


def test_forged_ready_adapters_outside_the_pools_sources_are_not_served():
    snap = build([m.pool("default")], allow_missing_status=False)
    assert set(snap.adapters) == {"acme-own"}
    assert snap.resolve("acme", "acme/x:prod") is None


def test_a_pool_without_sources_serves_nothing_marked_ready():
    bare = m.pool("default")
    bare["spec"]["adapterSources"] = []
    assert build([bare], allow_missing_status=False).adapters == {}


@pytest.mark.parametrize("pools", [[], [m.pool("other", base_hash="sha256:" + "c" * 64)]])
def test_adapters_no_served_pool_judges_are_left_as_they_were(pools):
    """No pool of the adapter's base model here: the gateway has nothing to judge by."""
    assert set(build(pools, allow_missing_status=False).adapters) == {
        "acme-own",
        "acme-theft",
        "acme-local",
    }


def test_hand_written_manifests_without_an_operator_are_unchanged():
    """allow_missing_status (a folder nobody reconciles): no verdict to contradict."""
    snap = build([m.pool("default")], allow_missing_status=True)
    assert set(snap.adapters) == {"acme-own", "acme-theft", "acme-local"}
