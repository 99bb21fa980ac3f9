"""The operator on kmock whose installed CRDs are older than its models: it says so at start.

The CRDs are this release's (lorafleet_core.api.crds), one of them with fields taken out, as
the previous release's would lack them after `helm upgrade` alone (Helm never upgrades crds/).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from lorafleet_core.api.crd_compat import missing_fields, outdated_fields
from lorafleet_core.api.crd_resources import RESOURCES
from lorafleet_core.api.crds import crd_manifest
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_fleet import ENV
from tests.operator.kopf_harness import operator_running

pytestmark = pytest.mark.timeout(120)

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def older(resource: Any) -> dict[str, Any]:
    """The CRD of `resource` as a release without spec.template.securityMode and
    status.conditions[].observedGeneration would have it."""
    crd = crd_manifest(resource)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    del schema["spec"]["properties"]["template"]["properties"]["securityMode"]
    del schema["status"]["properties"]["conditions"]["items"]["properties"]["observedGeneration"]
    return crd


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster("lfc")
    for resource in RESOURCES:
        body = older(resource) if resource.plural == "replicapools" else crd_manifest(resource)
        c.create(CRDS, copy.deepcopy(body))
    yield c
    c.close()


def test_an_older_crd_is_named_with_its_missing_fields_and_the_fix(cluster):
    """A Warning Event CRDOutdated about the old CRD (only that one) names the missing fields
    and the server-side apply that fixes it; the log has the same at warning level."""
    env = {**ENV, "LORAFLEET_OPERATOR_NAMESPACES": "lfc"}
    with operator_running(cluster, env) as runner:
        found = eventually(
            lambda: [
                e
                for e in cluster.items(cluster.path("events", group="v1"))
                if e.get("reason") == "CRDOutdated"
            ],
            what="the CRDOutdated Event",
        )
    assert len(found) == 1
    event = found[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "CustomResourceDefinition"
    assert event["involvedObject"]["name"] == "replicapools.lorafleet.dev"
    assert "spec.template.securityMode" in event["message"]
    assert "status.conditions[].observedGeneration" in event["message"]
    assert "kubectl apply --server-side" in event["message"]
    # The runner's output is whole once the operator has stopped.
    logged = [line for line in runner.output.splitlines() if "is older than this operator" in line]
    assert len(logged) == 1
    assert "WARNING" in logged[0], logged


def test_current_crds_lack_nothing_and_unknown_fields_hide_nothing():
    """This release's CRDs are current; a node keeping unknown fields lacks nothing below it."""
    for resource in RESOURCES:
        assert outdated_fields(resource, crd_manifest(resource)) == []
    assert outdated_fields(RESOURCES[0], {"spec": {"versions": []}}) == ["version v1alpha1"]
    wanted = {"properties": {"a": {"properties": {"b": {"type": "string"}}}}}
    assert missing_fields(wanted, {"properties": {"a": {"type": "object"}}}) == ["a.b"]
    kept = {"properties": {"a": {"x-kubernetes-preserve-unknown-fields": True}}}
    assert missing_fields(wanted, kept) == []
