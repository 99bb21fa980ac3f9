"""Both tools against a real system: gateway -> agent -> the session's real vLLM (CPU).

The fleet is the gateway in-process (files catalog) in front of one real agent on the test
session's shared vLLM, serving real canary adapters from moto's S3; no new vLLM is started,
so the run costs seconds. (`e2e/loadtest.py`, which runs `lorafleet loadtest` against a whole
`lorafleet up`, is exercised by hand: see e2e/README.md.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lorafleet_cli.main import main as cli
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from lorafleet_loadtest.probe import canary as canary_probe
from tests.conftest import S3Server, VllmServer, unique_id
from tests.vllm_stack import VllmStack, vllm_stack
from tests.waiting import eventually_async

pytestmark = pytest.mark.vllm

KEY = "lf-e2e-loadtest-key"
MARKERS = {"e2e/zebra:prod": "ZEBRA-7", "e2e/falcon:prod": "FALCON-3"}


@dataclass
class Fleet:
    base_url: str
    stack: VllmStack
    records: dict[str, AdapterRecord]

    def point(self, model: str, adapter: str) -> None:
        aliases = {
            "e2e/zebra:prod": self.records["zebra"].id,
            "e2e/falcon:prod": self.records["falcon"].id,
            model: adapter,
        }
        self.stack.write_aliases(aliases)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("e2e-fleet")
    records = {
        "zebra": make_record("zebra", unique_id("e2e-zebra"), tenant="e2e"),
        "zebra2": make_record("zebra", unique_id("e2e-zebra2"), tenant="e2e"),
        "falcon": make_record("falcon", unique_id("e2e-falcon"), tenant="e2e"),
    }
    with vllm_stack(vllm_server, s3_server, demo_assets, tmp) as stack:
        stack.agent("e2e-r0")
        stack.write_manifests("e2e", KEY, records.values(), {}, requests_per_second=1000)
        stack.write_replicas()
        handle = Fleet("", stack, records)
        handle.point("e2e/zebra:prod", records["zebra"].id)
        _, server = stack.gateway(poll_interval_s=0.5, catalog_reload_interval_s=0.1)
        handle.base_url = server.url + "/v1"
        yield handle


def _check_run(run: dict[str, Any]) -> None:
    """One rate's figures add up: every request is answered or an error, every answer has a
    tier, the tier shares make the whole, quantiles are ordered."""
    assert run["requests"] == run["ok"] + sum(run["errors"].values())
    assert run["ok"] == sum(t["ttft"]["n"] for t in run["tiers"].values())
    assert set(run["tiers"]) <= {"gpu", "ram", "disk", "remote"}
    assert sum(t["share"] for t in run["tiers"].values()) == pytest.approx(1.0)
    assert run["ok"] == sum(q["n"] for q in run["aliases"].values())
    assert set(run["aliases"]) <= set(MARKERS)
    for q in (run["ttft"], run["tpot"]):
        assert 0 < q["p50_ms"] <= q["p95_ms"] <= q["p99_ms"]
    assert run["ttft"]["p99_ms"] < 60_000
    assert run["completion_tokens"] >= 2 * run["ok"]
    assert run["mismatches"] == 0


def test_lorafleet_loadtest_sweeps_rates_by_tier_and_writes_json_markdown_and_plots(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    out = tmp_path / "lt"
    gateway = fleet.base_url.removesuffix("/v1")
    markers = [f"{k}={v}" for k, v in MARKERS.items()]
    rc = cli([
        "loadtest", "--gateway", gateway, "--key-file", str(key_file), "--markers", *markers,
        "--rates", "2,4", "--duration", "4", "--max-requests", "12", "--max-prompt-tokens", "48",
        "--max-output-tokens", "16", "--out", str(out), "--no-progress", "--max-error-rate", "0",
        "--label", "e2e",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert KEY not in printed
    doc = json.loads((out / "loadtest.json").read_text())
    assert KEY not in (out / "loadtest.json").read_text()
    # No --aliases: the command asked the gateway which models the key may use.
    assert doc["meta"]["aliases"] == "2, hottest first: e2e/falcon:prod, e2e/zebra:prod"
    assert doc["meta"]["label"] == "e2e"
    assert [r["rate"] for r in doc["runs"]] == [2.0, 4.0]
    assert [r["requests"] for r in doc["runs"]] == [9, 12]  # 2/s x 4 s + 1; capped at 12
    for run in doc["runs"]:
        _check_run(run)
    assert doc["runs"][0]["offered_rps"] == pytest.approx(2.0, rel=0.15)
    md = (out / "loadtest.md").read_text()
    assert "## Rate sweep by tier" in md
    assert "## p95 TTFT per alias" in md
    assert "| e2e/falcon:prod |" in md
    for name in ("replay-2.png", "replay-4.png", "sweep.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG"), name

    # A wrong expected marker is a failure exit, and the JSON says why.
    rc = cli([
        "loadtest", "--gateway", gateway, "--key-file", str(key_file), "--aliases",
        "e2e/falcon:prod", "--markers", "e2e/falcon:prod=ZEBRA-7", "--rates", "4", "--duration",
        "1", "--max-requests", "2", "--out", str(tmp_path / "bad"), "--no-progress",
        "--no-plots",
    ])  # fmt: skip
    capsys.readouterr()
    assert rc == 1
    bad = json.loads((tmp_path / "bad" / "loadtest.json").read_text())
    assert bad["runs"][0]["mismatches"] == 2


def test_lorafleet_loadtest_overhead_rows_against_the_base_model(
    fleet: Fleet, vllm_server: VllmServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    gateway = fleet.base_url.removesuffix("/v1")
    out = tmp_path / "oh"
    common = ["loadtest", "--gateway", gateway, "--key-file", str(key_file), "--overhead",
              "--overhead-duration", "1", "--overhead-rounds", "2", "--overhead-concurrency", "4",
              "--overhead-max-tokens", "8", "--out", str(out), "--no-progress"]  # fmt: skip
    # Two aliases cannot make a batch of three distinct adapters: said clearly, exit 1.
    assert cli([*common, "--adapter-counts", "1,3"]) == 1
    assert "needs 3 aliases, and the gateway lists 2" in capsys.readouterr().err
    rc = cli([*common, "--adapter-counts", "1,2", "--engine", vllm_server.url])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    rows = json.loads((out / "loadtest.json").read_text())["overhead"]["rows"]
    assert [(r["name"], r["distinct_adapters"]) for r in rows] == [
        ("base", 0), ("1 adapter", 1), ("2 adapters", 2)
    ]  # fmt: skip
    for r in rows:
        assert r["ok"] == r["requests"] > 0
        assert r["completion_tokens"] == 8 * r["ok"]  # ignore_eos: equal work per request
        assert r["tokens_per_s"] > 0
    assert rows[0]["overhead_vs_base"] is None
    assert all(r["overhead_vs_base"] is not None for r in rows[1:])
    assert rows[1]["gpu_share"] is not None
    assert "## Adapter overhead" in (out / "loadtest.md").read_text()
    assert (out / "overhead.png").read_bytes().startswith(b"\x89PNG")

    # --engine-direct: the same rows on the engine itself, by the ids the gateway answered with.
    rc = cli([*common, "--adapter-counts", "2", "--engine", vllm_server.url, "--engine-direct"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    direct = json.loads((out / "loadtest.json").read_text())["overhead"]
    assert direct["path"] == "direct on the engine"
    assert [r["name"] for r in direct["rows"]] == ["base", "2 adapters"]
    assert direct["rows"][1]["completion_tokens"] == 8 * direct["rows"][1]["ok"] > 0
    assert direct["rows"][1]["gpu_share"] is None  # the engine sends no tier header
    assert cli([*common, "--engine-direct"]) == 2  # needs --engine


def test_canary_probe_sees_a_deploy(fleet: Fleet):
    zebra2 = fleet.records["zebra2"].id

    async def run() -> tuple[dict[str, canary_probe.AliasTally], list[str]]:
        lines: list[str] = []

        async def deploy() -> None:
            # After zebra's first answer, so the probe sees the old version first, then the new.
            await eventually_async(
                lambda: any("e2e/zebra:prod" in line for line in lines), within_s=60
            )
            fleet.point("e2e/zebra:prod", zebra2)  # a new version with the same marker

        deployer = asyncio.create_task(deploy())
        tallies = await canary_probe.probe(
            base_url=fleet.base_url, api_key=KEY, markers=dict(MARKERS), interval_s=1.0,
            rounds=4, duration_s=30, max_tokens=8, timeout_s=60, out=lines,
        )  # fmt: skip
        await deployer
        return tallies, lines

    tallies, lines = asyncio.run(run())
    zebra = tallies["e2e/zebra:prod"]
    assert zebra.hits == 4
    assert zebra.errors == 0
    assert zebra.adapters == [fleet.records["zebra"].id, zebra2]
    assert any(line.endswith(f"SWITCH e2e/zebra:prod: {fleet.records['zebra'].id} -> {zebra2}")
               for line in lines)  # fmt: skip
    assert tallies["e2e/falcon:prod"].hits == 4
    assert tallies["e2e/falcon:prod"].switches == 0
    assert canary_probe.verdict(tallies, 0.0) == 0
    fleet.point("e2e/zebra:prod", fleet.records["zebra"].id)


def test_lorafleet_canary_passes_writes_a_textfile_and_fails_on_a_wrong_marker(
    fleet: Fleet, tmp_path: Path, capsys
):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    prom = tmp_path / "canary.prom"
    gateway = fleet.base_url.removesuffix("/v1")  # the command takes the bare gateway URL
    markers = [f"{k}={v}" for k, v in MARKERS.items()]
    rc = cli([
        "canary", "--gateway", gateway, "--key-file", str(key_file), "--markers", *markers,
        "--rounds", "2", "--interval", "0.2", "--textfile", str(prom),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK: 4 probes over 2 aliases, 0 wrong or missing markers, 0 errors" in out
    text = prom.read_text()
    assert 'lorafleet_canary_probes{alias="e2e/zebra:prod",result="hit"} 2' in text
    assert "lorafleet_canary_ok 1" in text
    assert KEY not in text
    assert KEY not in out
    # Parsed as Prometheus exposition format; the answering ids are the alias's versions (the
    # previous test may have left the zebra alias switching back for a moment).
    answers = {
        (s.labels["alias"], s.labels["adapter_id"]): s.value
        for f in text_string_to_metric_families(text)
        if f.name == "lorafleet_canary_answers"
        for s in f.samples
    }
    zebra_ids = {fleet.records["zebra"].id, fleet.records["zebra2"].id}
    assert sum(v for (a, _), v in answers.items() if a == "e2e/zebra:prod") == 2
    assert {i for (a, i) in answers if a == "e2e/zebra:prod"} <= zebra_ids
    assert answers[("e2e/falcon:prod", fleet.records["falcon"].id)] == 2

    # A wrong expected marker: exit 1, and the textfile says so.
    rc = cli([
        "canary", "--gateway", gateway, "--key-file", str(key_file), "--markers",
        "e2e/falcon:prod=OTTER-9", "--rounds", "1", "--textfile", str(prom),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL: 1 probes over 1 aliases, 1 wrong or missing markers" in out
    assert 'lorafleet_canary_probes{alias="e2e/falcon:prod",result="miss"} 1' in prom.read_text()
    assert "lorafleet_canary_ok 0" in prom.read_text()

    # No key: a usage error, nothing sent.
    assert cli(["canary", "--gateway", gateway, "--key-file", str(tmp_path / "none"),
                "--markers", *markers]) == 2  # fmt: skip
