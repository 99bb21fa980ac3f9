"""lorafleet_core.web.tracing: on only when the standard variables name an OTLP endpoint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lorafleet_core.web import tracing

REPO = Path(__file__).resolve().parents[2]

_OFF = """
import sys
import lorafleet_agent.__main__, lorafleet_gateway.__main__
from lorafleet_core.web import tracing
from opentelemetry import trace
assert tracing.setup("probe") is False
assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
sdk = ("opentelemetry.sdk", "opentelemetry.exporter")
loaded = sorted(m for m in sys.modules if m.startswith(sdk))
assert loaded == [], loaded
tracer = trace.get_tracer("probe")
client = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
request = tracing.start(tracer, "request", client)
headers = {}
with tracing.current(request), tracing.span(tracer, "attempt"):
    tracing.inject(headers)
assert headers == {}, headers
assert not request.get_span_context().is_valid
"""


def test_without_otel_variables_no_sdk_no_provider_and_no_header():
    """The gateway's and agent's modules loaded, `setup` called as their mains call it: no SDK
    or exporter module is imported, the global provider stays the API's proxy (no-op), and a
    request that came with a client's traceparent sends none upstream (the API's no-op tracer
    alone would pass the client's on)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", _OFF], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_enabled_by_an_otlp_endpoint_unless_the_sdk_is_disabled():
    assert not tracing.enabled({})
    assert not tracing.enabled({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not tracing.enabled(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "TRUE"}
    )
    assert not tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": " "})
