"""lorafleet_core.logs' two formats, read off records as a handler would see them."""

from __future__ import annotations

import contextvars
import json
import logging
import sys

import pytest

from lorafleet_core import logs
from lorafleet_core.web import request_ids


def _record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("lorafleet_gateway.x", logging.WARNING, __file__, 1, msg, (), None)
    record.__dict__.update(extra)
    return record


def _stamped(record: logging.LogRecord, **static: str) -> logging.LogRecord:
    logs.ContextFilter(static).filter(record)
    return record


def test_bound_fields_and_the_request_id_are_read_when_the_record_is_made():
    """A line made while serving a request names it, its tenant and adapter, even when the
    handler formats it later on another thread, outside the request's context."""

    def in_request() -> logging.LogRecord:
        request_ids.current.set("req-1")
        logs.bind(tenant="acme", adapter_id="acme-v2", replica=None)
        return _stamped(_record("slow"), replica="r0")

    record = contextvars.copy_context().run(in_request)
    doc = json.loads(logs.JsonFormatter().format(record))
    assert {k: doc[k] for k in ("request_id", "tenant", "adapter_id", "replica")} == {
        "request_id": "req-1",
        "tenant": "acme",
        "adapter_id": "acme-v2",
        "replica": "r0",
    }
    assert "tenant" not in json.loads(logs.JsonFormatter().format(_stamped(_record("idle"))))


def test_text_lines_carry_the_same_fields_and_keep_the_traceback_below():
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        record = _record("failed", exc_info=sys.exc_info(), tenant="acme")
    head, *trace = logs.TextFormatter().format(record).splitlines()
    assert head.endswith("WARNING lorafleet_gateway.x failed tenant=acme")
    assert logs.RFC3339_CHECK.fullmatch(head.split()[0])
    assert trace[0] == "Traceback (most recent call last):"
    doc = json.loads(logs.JsonFormatter().format(record))  # one line, the traceback a field
    assert doc["exception"].splitlines()[-2:] == ["ValueError: bad", "value"]


def test_kopf_object_loggers_name_the_resource():
    ref = {"kind": "ReplicaPool", "namespace": "serving", "name": "main"}
    doc = json.loads(logs.JsonFormatter().format(_record("Handler succeeded.", k8s_ref=ref)))
    assert (doc["kind"], doc["object"]) == ("ReplicaPool", "serving/main")


@pytest.mark.parametrize(("configured", "passed"), [("json", None), ("text", "text")])
def test_the_operator_passes_only_a_format_other_than_the_default(
    monkeypatch: pytest.MonkeyPatch, configured: str, passed: str | None
):
    monkeypatch.setattr(logs, "_format", configured)
    assert logs.replica_log_format() == passed
