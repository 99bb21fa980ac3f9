"""`python -m lorafleet_operator` as a real process against kmock, and the CLI hook."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from lorafleet_operator.cli import register
from tests.log_lines import json_lines
from tests.operator.factories import pool_body
from tests.operator.kmock_cluster import Cluster, eventually


@pytest.fixture
def solo() -> Iterator[Cluster]:
    c = Cluster("solo")
    yield c
    c.close()


@pytest.mark.timeout(120)
def test_python_m_lorafleet_operator_reconciles_a_pool(solo, tmp_path):
    """The process reconciles a pool, stops cleanly on SIGTERM, and logs only JSON lines."""
    env = os.environ | {
        "LORAFLEET_OPERATOR_API_SERVER": solo.url,
        "LORAFLEET_OPERATOR_NAMESPACES": "solo",
    }
    log = (tmp_path / "operator.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorafleet_operator"], env=env, stdout=log, stderr=log
    )
    try:
        body = pool_body("solo-pool")
        del body["metadata"]["namespace"]
        solo.create(solo.path("replicapools"), body)
        sts = eventually(
            lambda: solo.get(solo.path("statefulsets", "solo-pool", group="apps/v1")),
            within_s=60,
            what="StatefulSet from the operator process",
        )
        assert sts["spec"]["replicas"] == 1
        # The autoscaler daemon has ticked once (it writes desiredReplicas): the operator is
        # fully up, so the SIGTERM below tests a clean stop, not a start-up race.
        eventually(
            lambda: (
                "desiredReplicas"
                in ((solo.get(solo.path("replicapools", "solo-pool")) or {}).get("status") or {})
            ),
            within_s=30,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        graceful = True
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            graceful = False
            proc.kill()
            proc.wait()
        log.close()
    assert graceful, "the operator did not stop within 30 s of SIGTERM"
    text = (tmp_path / "operator.log").read_text()
    assert proc.returncode == 0, text[-3000:]
    # Every line, kopf's own included, is one JSON object of the shared log format; kopf's
    # lines about a resource name it.
    lines = json_lines(text)
    kopf_lines = [x for x in lines if x["logger"].startswith("kopf")]
    assert kopf_lines, "no line from kopf"
    assert any(x.get("object") == "solo/solo-pool" for x in kopf_lines), kopf_lines[:5]


def test_cli_register_adds_an_operator_subcommand():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["operator", "-n", "a", "-n", "b", "--verbose"])
    assert args.namespace == ["a", "b"]
    assert args.verbose is True
    assert callable(args.func)
