"""`kubectl get` columns, evaluated as the API server's table convertor does, on objects whose
status the real planners wrote: a Ready adapter, a Rejected one, and an alias whose deploy of
the Rejected adapter was refused (the old version still serves, and the table must say so).

The API server evaluates each column's JSONPath, takes the first match and prints `<none>` when
nothing matches (apiextensions-apiserver tableconvertor). kubectl cannot evaluate a custom
resource's columns without a server, so jsonpath-ng stands in for client-go's JSONPath; the
paths used here (fields, one filter on a condition type) mean the same in both.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jsonpath_ng.ext.parser import parse

from lorafleet_core.api import crds
from lorafleet_core.api.models import AdapterAlias, LoRAAdapter
from lorafleet_core.planning.adapters import AdapterInputs, Validation, plan_adapter_status
from lorafleet_core.planning.aliases import AdapterView, plan_alias

from .conftest import COMMITTED_CRDS, examples_of_kind

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def columns_of(kind: str) -> list[dict[str, Any]]:
    crd = COMMITTED_CRDS[kind]
    cols: list[dict[str, Any]] = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    return cols


def table_row(obj: dict[str, Any], wide: bool = False) -> dict[str, str]:
    """Column name -> cell text, as `kubectl get` (or `-o wide`) prints it."""
    row: dict[str, str] = {}
    for col in columns_of(obj["kind"]):
        if col.get("priority", 0) > 0 and not wide:
            continue
        matches = parse("$" + col["jsonPath"]).find(obj)
        if not matches:
            row[col["name"]] = "<none>"
            continue
        value = matches[0].value
        if col["type"] == "integer":
            assert isinstance(value, int), f"{col['name']}: {value!r} is not an integer"
        elif col["type"] == "string":
            assert isinstance(value, str), f"{col['name']}: {value!r} is not a string"
        row[col["name"]] = str(value)
    return row


def adapter(name: str, validation: Validation, owners: list[str]) -> dict[str, Any]:
    base = next(a for a in examples_of_kind("LoRAAdapter") if a["metadata"]["name"] == name)
    model = LoRAAdapter.model_validate(base)
    status = plan_adapter_status(
        model,
        AdapterInputs(validation, owners=owners, owner_count=len(owners) or None, ready_replicas=3),
        T0,
    )
    return {**base, "status": status.wire()}


READY_V1 = adapter(
    "acme-support-v1", Validation(True, "Valid", "ok", pool="llama-7b"), ["r0", "r1"]
)
REJECTED_V2 = adapter(
    "acme-support-v2",
    Validation(False, "RankTooHigh", "rank 32 exceeds maxRank 16", pool="llama-7b", final=True),
    [],
)


def alias_after_refused_deploy() -> dict[str, Any]:
    """v1 deployed and serving; then spec.adapter set to v2, which is Rejected."""
    base = examples_of_kind("AdapterAlias")[0]
    views = {
        "acme-support-v1": AdapterView(
            tenant="acme", phase=READY_V1["status"]["phase"], verified=True
        ),
        "acme-support-v2": AdapterView(tenant="acme", phase=REJECTED_V2["status"]["phase"]),
    }
    first = AdapterAlias.model_validate(
        {**base, "spec": {**base["spec"], "adapter": "acme-support-v1"}}
    )
    first.status = plan_alias(first, views, [], T0).status
    second = first.model_copy(deep=True)
    second.spec.adapter = "acme-support-v2"
    second.status = plan_alias(second, views, [], T0 + timedelta(minutes=5)).status
    return second.wire()


def test_every_kind_has_ready_and_wide_reason_message():
    for resource in crds.RESOURCES:
        cols = {c["name"]: c for c in columns_of(resource.kind)}
        assert cols["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
        assert cols["Reason"]["priority"] == cols["Message"]["priority"] == 1
        assert "priority" not in cols["Ready"]


def test_ready_adapter_row_shows_ready_phase_and_owner_count():
    row = table_row(READY_V1)
    assert row["Ready"] == "True"
    assert row["Phase"] == "Ready"
    assert row["Owners"] == "2"  # a count, not the JSON array of replica ids
    assert "Reason" not in row


def test_rejected_adapter_wide_row_says_why():
    row = table_row(REJECTED_V2, wide=True)
    assert (row["Ready"], row["Phase"], row["Owners"]) == ("False", "Rejected", "<none>")
    assert row["Reason"] == "RankTooHigh"  # the cause, not the phase again
    assert "maxRank 16" in row["Message"]


def test_refused_deploy_shows_the_adapter_that_still_serves():
    alias = alias_after_refused_deploy()
    row = table_row(alias)
    assert row["Serving"] == "acme-support-v1"  # not spec.adapter (v2)
    assert row["Ready"] == "True"  # v1 still serves
    assert row["Deployed"] == "False"
    assert "Wanted" not in row
    wide = table_row(alias, wide=True)
    assert wide["Wanted"] == "acme-support-v2"
    assert wide["Reason"] == "AdapterNotReady"
    assert "still serving acme-support-v1" in wide["Message"]


def test_alias_previous_column_names_the_rollback_target():
    base = examples_of_kind("AdapterAlias")[0]
    views = {
        n: AdapterView(tenant="acme", phase=READY_V1["status"]["phase"], verified=True)
        for n in ("acme-support-v1", "acme-support-v2")
    }
    alias = AdapterAlias.model_validate(
        {**base, "spec": {**base["spec"], "adapter": "acme-support-v1"}}
    )
    alias.status = plan_alias(alias, views, [], T0).status
    alias.spec.adapter = "acme-support-v2"
    alias.status = plan_alias(alias, views, [], T0 + timedelta(minutes=1)).status
    row = table_row(alias.wire())
    assert (row["Serving"], row["Previous"], row["Deployed"]) == (
        "acme-support-v2",
        "acme-support-v1",
        "True",
    )


def test_fresh_objects_print_none_not_errors():
    for kind in ("LoRAAdapter", "AdapterAlias", "ReplicaPool"):
        row = table_row(examples_of_kind(kind)[0], wide=True)
        assert row["Ready"] == "<none>"
        assert row["Age"] == "<none>"  # no creationTimestamp in a manifest


def test_pool_row_reads_the_ready_condition_and_counts():
    pool = examples_of_kind("ReplicaPool")[0]
    status = {
        "replicas": 3,
        "readyReplicas": 2,
        "desiredReplicas": 3,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "ReplicasReady",
                "message": "2/3 replicas ready",
                "lastTransitionTime": "2026-11-29T12:00:00Z",
            }
        ],
    }
    row = table_row({**pool, "status": status}, wide=True)
    assert (row["Ready"], row["Replicas"], row["Ready Replicas"]) == ("True", "3", "2")
    assert row["Message"] == "2/3 replicas ready"


@pytest.mark.parametrize("resource", crds.RESOURCES, ids=lambda r: r.kind)
def test_column_paths_parse_and_names_are_unique(resource):
    names = [c.name for c in resource.columns]
    assert len(names) == len(set(names))
    for col in resource.columns:
        assert col.json_path.startswith(".")
        parse("$" + col.json_path)


def test_alias_whose_served_adapter_vanished_says_so_in_the_row():
    base = examples_of_kind("AdapterAlias")[0]
    views = {
        "acme-support-v1": AdapterView(
            tenant="acme", phase=READY_V1["status"]["phase"], verified=True
        )
    }
    alias = AdapterAlias.model_validate(
        {**base, "spec": {**base["spec"], "adapter": "acme-support-v1"}}
    )
    alias.status = plan_alias(alias, views, [], T0).status
    alias.status = plan_alias(alias, {}, [], T0 + timedelta(minutes=1)).status  # v1 is gone
    row = table_row(alias.wire(), wide=True)
    assert (row["Ready"], row["Serving"], row["Deployed"]) == ("False", "acme-support-v1", "False")
    assert row["Reason"] == "AdapterNotFound"
