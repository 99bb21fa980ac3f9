"""`lorafleet usage`: the billing export reads the gateway's counters, or a real Prometheus
scraping them, and agrees with the `usage` the responses carried."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lorafleet_cli.main import main
from tests.conftest import free_port
from tests.gateway.conftest import MSG_DEFAULT, GatewayEnv, start_env, stop_env
from tests.waiting import eventually


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayEnv]:
    env = start_env(tmp_path, n_replicas=2)
    try:
        yield env
    finally:
        stop_env(env)


def run_usage(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["usage", *args]) == 0
    return capsys.readouterr().out


def traffic(env: GatewayEnv) -> dict[tuple[str, str], list[int]]:
    """Some requests of two tenants; (tenant, adapter) -> [requests, prompt, completion]."""
    sums: dict[tuple[str, str], list[int]] = {}
    calls = [("acme", "acme/support:prod", "acme-support-v1")] * 3 + [
        ("globex", "globex/bot:prod", "globex-bot-v1")
    ]
    for tenant, model, adapter in calls:
        r = env.client(tenant).chat.completions.create(model=model, messages=MSG_DEFAULT)
        assert r.usage is not None
        row = sums.setdefault((tenant, adapter), [0, 0, 0])
        row[0] += 1
        row[1] += r.usage.prompt_tokens
        row[2] += r.usage.completion_tokens
    return sums


def test_csv_from_the_gateway_matches_the_responses_usage(
    gateway: GatewayEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    sums = traffic(gateway)
    out = run_usage(capsys, "--gateway-metrics", f"{gateway.internal_url}/metrics", "-o", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    got = {
        (r["tenant"], r["adapter"]): [
            int(r["requests"]),
            int(r["prompt_tokens"]),
            int(r["completion_tokens"]),
        ]
        for r in rows
    }
    assert got == sums
    assert all(
        int(r["total_tokens"]) == int(r["prompt_tokens"]) + int(r["completion_tokens"])
        for r in rows
    )


def test_tenant_filter_and_json(gateway: GatewayEnv, capsys: pytest.CaptureFixture[str]) -> None:
    sums = traffic(gateway)
    out = run_usage(
        capsys,
        "--gateway-metrics",
        f"{gateway.internal_url}/metrics",
        "--tenant",
        "globex",
        "-o",
        "json",
    )
    data = json.loads(out)
    assert data["window"]["start"] == "gateway start"
    assert [(u["tenant"], u["adapter"], u["requests"]) for u in data["usage"]] == [
        ("globex", "globex-bot-v1", sums[("globex", "globex-bot-v1")][0])
    ]


def test_a_bad_since_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--since", "yesterday", "--gateway-metrics", "http://x"]) == 2
    assert "--since" in capsys.readouterr().err


def test_no_source_fails_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--state-dir", str(tmp_path)]) == 1
    assert "no usage source" in capsys.readouterr().err


@pytest.fixture
def prometheus_bin() -> str:
    found = shutil.which("prometheus")
    if found is None and shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for args in (["update", "-qq"], ["install", "-y", "-qq", "prometheus"]):
            subprocess.run(["apt-get", *args], check=True, timeout=600, env=env)
        found = shutil.which("prometheus")
    if found is None:
        pytest.fail("prometheus is missing: `apt-get install prometheus`")
    return found


def test_prometheus_export_sums_what_was_served_in_the_window(
    gateway: GatewayEnv, prometheus_bin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = gateway.internal_url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs: [{{job_name: gw, static_configs: [{{targets: ['{target}']}}]}}]\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Counters that start between two scrapes are not an increase to Prometheus: let the
        # series exist first (one request each), then count the traffic that follows.
        before = traffic(gateway)

        def scraped(expected: float) -> bool:
            try:
                r = httpx.get(
                    f"{url}/api/v1/query",
                    params={"query": "sum(lorafleet_gateway_usage_requests_total)"},
                )
                result = r.json()["data"]["result"]
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            return bool(result) and float(result[0]["value"][1]) == expected

        eventually(lambda: scraped(4), within_s=60, what="Prometheus to scrape the gateway")
        after = traffic(gateway)
        eventually(lambda: scraped(8), within_s=30, what="the second batch scraped")
        out = run_usage(capsys, "--prometheus", url, "--since", "10m", "-o", "json")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    rows = {(u["tenant"], u["adapter"]): u for u in json.loads(out)["usage"]}
    assert set(rows) == set(after) == set(before)
    for key, (n, prompt, completion) in after.items():
        # increase() extrapolates to the window's edges: at least what was served after the
        # series existed, never more than everything.
        total = [n + before[key][0], prompt + before[key][1], completion + before[key][2]]
        assert n <= rows[key]["requests"] <= total[0] * 1.5, (key, rows[key])
        assert prompt <= rows[key]["prompt_tokens"] <= total[1] * 1.5
        assert completion <= rows[key]["completion_tokens"] <= total[2] * 1.5
