"""Standalone mode honours spec.split: the reconciler lets a version in through the deploy
gate, and the gateway's folder catalog serves the split the reconciler wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lorafleet_core.storage.manifests import write_object
from lorafleet_core.storage.standalone_state import load_alias_statuses
from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_files import FileCatalog
from tests.manifest_folder import alias_manifest
from tests.standalone.test_reconciler import _holding, _setup


def split_alias(*pairs: tuple[str, int]) -> dict[str, Any]:
    doc = alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v1")
    if pairs:
        doc["spec"]["split"] = [{"adapter": a, "weight": w} for a, w in pairs]
    return doc


def served_split(folder: Path) -> tuple[tuple[str, int], ...]:
    holder = CatalogHolder()
    FileCatalog(holder, folder).build()
    target = holder.current.aliases["acme/a:prod"]
    assert target.adapter_id == "acme-a-v1"
    return target.split


def test_a_split_version_serves_once_verified_and_rolls_back_in_one_edit(folder, tmp_path):
    _, _, rec, messages = _setup(folder, tmp_path)
    rec.tick()
    write_object(folder, split_alias(("acme-a-v2", 5)))
    plan = rec.tick(_holding(rec.last, pulling=("acme-a-v2",)))
    assert plan is not None
    assert plan.traffic == {}
    assert rec.awaiting_replicas  # `up` polls the replicas meanwhile
    assert any("AwaitingReplicas" in str(p) for p in plan.problems)
    assert served_split(folder) == ()  # the gate holds v2 back in the gateway too

    plan = rec.tick(_holding(rec.last))  # a replica holds v2's verified files now
    assert plan is not None
    assert plan.traffic == {"acme/a:prod": "acme-a-v1=95,acme-a-v2=5"}
    assert not rec.awaiting_replicas
    assert messages[-1] == "serving acme/a:prod -> acme-a-v1=95,acme-a-v2=5"
    status = load_alias_statuses(folder)["acme-a-prod"]
    assert [(s.adapter, s.weight) for s in status.split or ()] == [("acme-a-v2", 5)]
    assert served_split(folder) == (("acme-a-v2", 5),)

    write_object(folder, split_alias(("acme-a-v2", 50)))
    rec.tick(_holding(rec.last))
    assert served_split(folder) == (("acme-a-v2", 50),)

    write_object(folder, split_alias())  # rollback: the entry removed
    plan = rec.tick(_holding(rec.last))
    assert plan is not None
    assert plan.traffic == {}
    assert served_split(folder) == ()


def test_a_version_the_replicas_refuse_never_takes_traffic(folder, tmp_path):
    _, _, rec, _ = _setup(folder, tmp_path)
    rec.tick()
    write_object(folder, split_alias(("acme-a-v2", 50)))
    # Every owner refuses v2's files: it turns Failed, and its half stays with v1.
    rec.tick(_holding(rec.last, failing=("acme-a-v2",)))
    plan = rec.last
    assert plan is not None
    assert plan.adapter_statuses["acme-a-v2"].phase == "Failed"
    assert plan.traffic == {}
    assert any("acme-a-v2 is Failed" in str(p) for p in plan.problems)
    assert served_split(folder) == ()
