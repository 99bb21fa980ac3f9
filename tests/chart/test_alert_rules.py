"""The chart's alerts: promtool accepts them and its unit tests (tests/chart/promtool/) pass,
every alert has a standard severity and a runbook section that exists, and every alert is
unit-tested firing. promtool comes from Debian's `prometheus` package (`make install` installs
it as root; the fixture below installs it when it is missing and it can)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.chart_render import ROOT, rule_groups

PROMTOOL_TESTS = Path(__file__).parent / "promtool" / "alerts_test.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/lorafleet/lorafleet/blob/main/docs/runbook.md#"
SEVERITIES = {"critical", "warning", "info"}


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None and shutil.which("apt-get") and _is_root():
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for args in (["update", "-qq"], ["install", "-y", "-qq", "prometheus"]):
            subprocess.run(["apt-get", *args], check=True, timeout=600, env=env)
        found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: `apt-get install prometheus` (or run `make install` as root)"
        )
    return found


def _is_root() -> bool:
    return os.geteuid() == 0


def alerts() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"] if "alert" in r]


def run_promtool(promtool: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    return subprocess.run(
        [promtool, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )


def test_rules_pass_promtool_check(promtool, tmp_path):
    result = run_promtool(promtool, tmp_path, "check", "rules", "rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    rules = sum(len(g["rules"]) for g in rule_groups())
    assert f"SUCCESS: {rules} rules found" in result.stdout


def test_rules_pass_promtool_unit_tests(promtool, tmp_path):
    result = run_promtool(promtool, tmp_path, "test", "rules", PROMTOOL_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_expectation_fails_the_unit_tests(promtool, tmp_path):
    """The unit tests can fail: a wrong severity in one expectation is caught."""
    run_promtool(promtool, tmp_path, "check", "rules", "rules.yaml")  # writes rules.yaml
    text = PROMTOOL_TESTS.read_text().replace(
        "{severity: critical, namespace: serving}", "{severity: page, namespace: serving}", 1
    )
    (tmp_path / PROMTOOL_TESTS.name).write_text(text)
    result = subprocess.run(
        [promtool, "test", "rules", PROMTOOL_TESTS.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0


def test_every_alert_has_a_standard_severity():
    for alert in alerts():
        assert alert["labels"]["severity"] in SEVERITIES, alert["alert"]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_alert_links_a_runbook_section_that_exists():
    text = RUNBOOK.read_text()
    anchors = github_anchors(text)
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    for alert in alerts():
        url = alert["annotations"]["runbook_url"]
        assert url.startswith(RUNBOOK_URL), url
        anchor = url.removeprefix(RUNBOOK_URL)
        assert anchor in anchors, f"{alert['alert']}: docs/runbook.md has no section #{anchor}"
        (section,) = [s for s in sections if github_anchors("## " + s.splitlines()[0]) == {anchor}]
        assert f"`{alert['alert']}`" in section, f"section #{anchor} does not name {alert['alert']}"
        assert "Confirm" in section, f"section #{anchor} does not say how to confirm"
        assert "Do:" in section, f"section #{anchor} does not say what to do"


def test_internal_runbook_links_resolve():
    text = RUNBOOK.read_text()
    anchors = github_anchors(text)
    for link in re.findall(r"\]\(#([^)]+)\)", text):
        assert link in anchors, link


def test_every_alert_is_unit_tested_firing():
    cases = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    fired = {
        t["alertname"]
        for case in cases
        for t in case.get("alert_rule_test", [])
        if t.get("exp_alerts")
    }
    assert {a["alert"] for a in alerts()} - fired == set()


def test_server_error_alert_counts_stream_errors():
    (alert,) = [a for a in alerts() if a["alert"] == "LorafleetGatewayServerErrors"]
    assert 'status=~"5..|stream_error"' in alert["expr"]


def test_absent_target_alerts_cover_every_component():
    absent = {a["alert"] for a in alerts() if a["expr"].startswith("absent(")}
    assert absent == {
        "LorafleetGatewayAbsent",
        "LorafleetOperatorAbsent",
        "LorafleetReplicasAbsent",
    }
