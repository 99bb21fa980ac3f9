"""No process exports `_created` series (lorafleet_core.web.exposition).

Each check runs in a fresh interpreter: the switch is process-wide, so in this test process
any module that imported it first would hide a metrics module that forgot to."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRAPES = {
    "agent": (
        "from lorafleet_agent.metrics import AgentMetrics\n"
        "m = AgentMetrics(); m.loads.labels('remote').inc(); m.load_seconds.labels('remote')"
        ".observe(0.1); r = m.registry"
    ),
    "gateway": (
        "from lorafleet_gateway.metrics import GatewayMetrics\nm = GatewayMetrics(); r = m.registry"
    ),
    "operator": (
        "from lorafleet_operator.metrics import OperatorMetrics\n"
        "m = OperatorMetrics(lambda: {}); r = m.registry"
    ),
}


@pytest.mark.parametrize("process", sorted(SCRAPES))
def test_no_process_exports_created_series(process: str) -> None:
    code = SCRAPES[process] + "\nfrom prometheus_client import generate_latest\n"
    code += "print(generate_latest(r).decode())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "_total" in out or "_count" in out  # counters are there
    assert "_created" not in out
