"""lorafleet_core.logs' two formats, read off records as a handler would see them."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lorafleet_core import logs
from lorafleet_core.web import request_ids
from tests.log_lines import json_lines


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


# What vLLM's API server does with its logging settings at start (arg parsing), then lines from
# its own loggers and its HTTP server's; the uvicorn config it would give its server, too.
ENGINE_START = """
import argparse, logging
from vllm.config.logging import LoggingConfig
from vllm.entrypoints.launchers.utils.server_utils import get_uvicorn_log_config
from vllm.logger import configure_logging, init_logger
configure_logging(LoggingConfig())
init_logger("vllm.engine.x").info("engine line %d", 1)
logging.getLogger("uvicorn.access").info("POST /v1/completions 200")
config = get_uvicorn_log_config(
    argparse.Namespace(logging_config=LoggingConfig(), disable_access_log_for_endpoints=None)
)
print(sorted(config["loggers"]) if config else None)
"""


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_vllm_logs_in_lorafleets_format_through_the_engine_logging_config(tmp_path: Path, fmt: str):
    """The file the replica image and `lorafleet up` give vLLM (VLLM_LOGGING_CONFIG_PATH): its
    loggers and its uvicorn's write one line each in LORAFLEET_LOG_FORMAT (before: vLLM's
    `INFO 12-06 21:23:50 [file.py:12] ...` and uvicorn's `INFO:     ...` beside JSON)."""
    config = logs.write_engine_logging_config(tmp_path / "vllm-logging.json")
    env = {**os.environ, logs.ENGINE_LOGGING_ENV: str(config), logs.FORMAT_ENV: fmt}
    run = subprocess.run(
        [sys.executable, "-c", ENGINE_START],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert run.stdout.strip() == str(sorted(logs.ENGINE_LOGGERS))  # uvicorn gets the same file
    ours = [line for line in run.stderr.splitlines() if "engine line" in line or "POST" in line]
    assert len(ours) == 2, run.stderr
    if fmt == "json":
        docs = json_lines("\n".join(ours))
        assert [(d["logger"], d["message"]) for d in docs] == [
            ("vllm.engine.x", "engine line 1"),
            ("uvicorn.access", "POST /v1/completions 200"),
        ]
    else:
        assert [line.split(" ", 3)[1:3] for line in ours] == [
            ["INFO", "vllm.engine.x"],
            ["INFO", "uvicorn.access"],
        ]
