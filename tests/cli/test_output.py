"""The CLI's output module: its JSONPath reads every CRD printer column as jsonpath-ng (our
stand-in for the API server's) does, ages print as kubectl's, tables align."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from jsonpath_ng.ext.parser import parse

from lorafleet_cli.output import Column, age, json_path, kind_columns, render_table
from lorafleet_core.api.crd_resources import RESOURCES

OBJECT = {
    "metadata": {"name": "x", "creationTimestamp": "2026-11-29T12:00:00Z"},
    "spec": {
        "tenant": "acme",
        "version": "v1",
        "rank": 8,
        "model": "acme/a:prod",
        "adapter": "acme-a-v2",
        "baseModel": {"name": "llama"},
        "replicas": {"min": 1, "max": 4},
    },
    "status": {
        "phase": "Ready",
        "ownerCount": 2,
        "adapter": "acme-a-v1",
        "readyReplicas": 3,
        "conditions": [
            {"type": "Deployed", "status": "False", "reason": "AdapterNotReady", "message": "m"},
            {"type": "Ready", "status": "True", "reason": "Serving", "message": "ok"},
        ],
    },
}


@pytest.mark.parametrize(
    "path", sorted({c.json_path for r in RESOURCES for c in r.columns}), ids=str
)
def test_json_path_agrees_with_jsonpath_ng(path):
    matches = parse("$" + path).find(OBJECT)
    expected = matches[0].value if matches else None
    assert json_path(OBJECT, path) == expected


def test_missing_parts_read_as_none():
    assert json_path({}, '.status.conditions[?(@.type=="Ready")].status') is None
    assert (
        json_path({"status": {"conditions": "bad"}}, '.status.conditions[?(@.type=="R")].x') is None
    )


def test_age_reads_like_kubectl():
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    stamp = (now - timedelta(days=3, hours=2)).isoformat()
    assert age(stamp, now) == "3d"
    assert age((now - timedelta(minutes=5)).isoformat(), now) == "5m"
    assert age((now - timedelta(seconds=9)).isoformat(), now) == "9s"
    assert age(None, now) == "<none>"


def test_table_hides_wide_columns_unless_asked():
    cols = [Column("A", lambda r: str(r["a"])), Column("B", lambda r: "b", wide_only=True)]
    assert render_table([{"a": "long value"}], cols, wide=False) == "A\nlong value"
    assert render_table([{"a": 1}], cols, wide=True).splitlines() == ["A   B", "1   b"]


def test_kind_columns_start_with_name_and_follow_the_crd():
    names = [c.name for c in kind_columns("AdapterAlias")]
    assert names[:4] == ["NAME", "READY", "MODEL", "SERVING"]
