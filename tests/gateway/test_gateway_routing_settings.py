"""The router's knobs as gateway settings: defaults, environment, refusal of bad values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from lorafleet_gateway.router import Thresholds
from lorafleet_gateway.runtime import thresholds_from_settings
from lorafleet_gateway.settings import GatewaySettings
from tests.log_lines import json_lines

REPO = Path(__file__).resolve().parents[2]


def test_default_settings_route_with_the_shipped_affinity_policy():
    t = thresholds_from_settings(GatewaySettings())
    assert t == Thresholds(16384, 32, balance=1.25, spill="rendezvous", policy="affinity")


def test_routing_knobs_from_the_environment_reach_the_router(monkeypatch):
    monkeypatch.setenv("LORAFLEET_GATEWAY_ROUTING_POLICY", "random")
    monkeypatch.setenv("LORAFLEET_GATEWAY_ROUTING_BALANCE", "1.5")
    monkeypatch.setenv("LORAFLEET_GATEWAY_ROUTING_SPILL", "least_loaded")
    monkeypatch.setenv("LORAFLEET_GATEWAY_MAX_TOKENS_IN_FLIGHT", "40000")
    monkeypatch.setenv("LORAFLEET_GATEWAY_MERGED_MAX_QUEUE_DEPTH", "6")
    monkeypatch.setenv("LORAFLEET_GATEWAY_MERGED_MAX_TOKENS_IN_FLIGHT", "0")
    t = thresholds_from_settings(GatewaySettings())
    assert (t.policy, t.balance, t.spill, t.max_tokens_in_flight) == (
        "random",
        1.5,
        "least_loaded",
        40000,
    )
    assert (t.merged_max_queue_depth, t.merged_max_tokens_in_flight) == (6, 0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("routing_policy", "round_robin"),
        ("routing_policy", "Affinity"),
        ("routing_spill", "nearest"),
        ("routing_balance", -1),
        ("routing_balance", float("inf")),
        ("merged_max_queue_depth", -1),
        ("merged_max_tokens_in_flight", -5),
    ],
)
def test_invalid_routing_settings_are_refused(name, value):
    with pytest.raises(ValidationError, match=name):
        GatewaySettings.model_validate({name: value})


def test_gateway_process_with_an_unknown_policy_exits_naming_the_variable_and_choices():
    env = {
        **os.environ,
        "LORAFLEET_GATEWAY_ROUTING_POLICY": "round_robin",
        "LORAFLEET_GATEWAY_ROUTING_BALANCE": "-2",
    }
    done = subprocess.run(
        [sys.executable, "-m", "lorafleet_gateway"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    (line,) = json_lines(done.stderr)  # one log line, in the format of every other
    assert line["level"] == "CRITICAL"
    lines = line["message"].splitlines()
    assert lines[0] == "lorafleet gateway: invalid settings, not starting"
    assert (
        "  LORAFLEET_GATEWAY_ROUTING_POLICY='round_robin': "
        "Input should be 'affinity', 'least_loaded' or 'random'"
    ) in lines
    assert any(line.startswith("  LORAFLEET_GATEWAY_ROUTING_BALANCE='-2'") for line in lines)
    assert "Traceback" not in done.stderr
