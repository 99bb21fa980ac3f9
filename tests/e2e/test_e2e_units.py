"""The pure parts of the load test and canary probe: lengths, statistics, markers, plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.workload import Request, WorkloadSpec, adapter_name
from e2e import loadtest
from e2e.loadplan import LengthLimits, plan_workload, prompt_text, scale_length, scale_requests
from e2e.plots import per_second, write_plots
from lorafleet_cli.probe import canary as canary_probe
from lorafleet_cli.probe.client import reproduce_command
from lorafleet_cli.probe.markers import markers_from_manifests, parse_marker_args
from lorafleet_cli.probe.results import (
    RequestResult,
    format_summary,
    marker_matches,
    percentile,
    summarize,
)

TRACE = WorkloadSpec().trace


def req(at: float, prompt: int, output: int, rank: int) -> Request:
    return Request(at, prompt, output, adapter_name(rank))


def ok_result(i: int, ttft: float, tier: str, *, marker_ok: bool | None = True) -> RequestResult:
    return RequestResult(
        i, "a", float(i), float(i), "200", ttft_s=ttft, total_s=ttft + 0.1,
        completion_tokens=5, tier=tier, replica="r0", adapter_id="a-v1", text="ZEBRA-7",
        marker_ok=marker_ok,
    )  # fmt: skip


def test_scale_length_keeps_order_and_bounds():
    assert scale_length(0, 32, 0.5) == 1
    assert scale_length(10, 32, 0.5) == 5
    assert scale_length(1000, 32, 0.5) == 32
    assert scale_length(2, 32, 0.5, floor=8) == 8
    assert [scale_length(n, 64, 0.1) for n in (10, 100, 400, 5000)] == [1, 10, 40, 64]


def test_scale_requests_maps_ranks_and_lengths():
    trace = [req(10.0, 100, 10, 1), req(11.0, 4000, 400, 2), req(12.5, 2000, 200, 1)]
    limits = LengthLimits(max_prompt_tokens=40, max_output_tokens=20, mode="scale")
    plan = scale_requests(trace, ["hot", "cold"], limits)
    assert [p.alias for p in plan] == ["hot", "cold", "hot"]
    assert [p.at for p in plan] == [0.0, 1.0, 2.5]  # relative to the first request
    assert [p.prompt_tokens for p in plan] == [1, 40, 20]  # p95 (4000) maps onto the cap
    assert [p.max_tokens for p in plan] == [8, 20, 10]  # floor: the marker must fit
    capped = scale_requests(trace, ["hot", "cold"], LengthLimits(40, 20, mode="cap"))
    assert [p.prompt_tokens for p in capped] == [40, 40, 40]
    assert [p.max_tokens for p in capped] == [10, 20, 20]


def test_length_limits_refuse_what_the_model_cannot_hold():
    with pytest.raises(ValueError, match="max-model-len 256"):
        LengthLimits(max_prompt_tokens=200, max_output_tokens=64, max_model_len=256)
    with pytest.raises(ValueError, match="length mode"):
        LengthLimits(mode="stretch")


def test_plan_from_the_real_trace_is_bounded_and_seeded():
    spec = WorkloadSpec(TRACE, 1.0, 3, 1.0, 0)
    aliases = ["a", "b", "c"]
    plan = plan_workload(spec=spec, aliases=aliases, limits=LengthLimits(), max_requests=50,
                         duration_s=10.0)  # fmt: skip
    assert 0 < len(plan) <= 50
    assert all(p.at <= 10.0 for p in plan)
    assert all(p.prompt_tokens + p.max_tokens <= 256 - 16 for p in plan)
    again = plan_workload(spec=spec, aliases=aliases, limits=LengthLimits(), max_requests=50,
                          duration_s=10.0)  # fmt: skip
    assert plan == again
    assert {p.alias for p in plan} <= set(aliases)


def test_prompt_text_has_about_the_asked_length():
    assert len(prompt_text(48, 0, 2.4).split()) == 20
    assert prompt_text(10, 1, 2.4) != prompt_text(10, 2, 2.4)


def test_percentile_and_summary():
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0
    results = [ok_result(i, 0.01 * (i + 1), "gpu") for i in range(8)]
    results += [ok_result(8, 0.5, "remote"), ok_result(9, 0.2, "disk", marker_ok=False)]
    results.append(RequestResult(10, "a", 10.0, 10.0, "503", error="upstream_unavailable"))
    s = summarize(results, elapsed_s=10.0, planned_span_s=11.0)
    assert (s.requests, s.ok) == (11, 10)
    assert s.errors == {"503": 1}
    assert s.tier_mix == {"gpu": 8, "remote": 1, "disk": 1}
    assert s.ttft["gpu"] == (0.04, 0.08, 0.08)
    assert s.ttft["all"][2] == 0.5
    assert s.achieved_rps == pytest.approx(1.0)
    assert s.offered_rps == pytest.approx(1.0)
    assert [r.index for r in s.mismatches] == [9]
    text = format_summary(s)
    assert "MARKER MISMATCHES: 1" in text
    assert "503: 1" in text
    assert loadtest.exit_code(s, max_error_rate=0.5) == 1  # a mismatch always fails
    s.mismatches = []
    assert loadtest.exit_code(s, max_error_rate=0.5) == 0
    assert loadtest.exit_code(s, max_error_rate=0.05) == 1  # 1/11 errors


def test_marker_checks_and_arguments():
    assert marker_matches("ZEBRA-7 ZEBRA", "ZEBRA-7") is True
    assert marker_matches("OTTER-9", "ZEBRA-7") is False
    assert marker_matches("anything", None) is None
    assert marker_matches("ZE", "ZEBRA-7") is False
    assert marker_matches("ZE", "ZEBRA-7", truncated=True) is True  # cut by max_tokens
    assert marker_matches("OT", "ZEBRA-7", truncated=True) is False
    assert marker_matches("", "ZEBRA-7", truncated=True) is False
    assert parse_marker_args(["demo/zebra:prod=ZEBRA-7"]) == {"demo/zebra:prod": "ZEBRA-7"}
    with pytest.raises(ValueError, match="alias=MARKER"):
        parse_marker_args(["demo/zebra:prod"])


def test_markers_from_demo_style_manifests(tmp_path: Path):
    def adapter(name: str, label: str | None, annotation: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "labels": {}}
        if label:
            meta["labels"]["lorafleet.dev/adapter-name"] = label
        if annotation:
            meta["annotations"] = {"lorafleet.dev/canary-marker": annotation}
        return {"kind": "LoRAAdapter", "metadata": meta, "spec": {}}

    def alias(model: str, target: str) -> dict[str, Any]:
        name = model.replace("/", "-").replace(":", "-")
        return {"kind": "AdapterAlias", "metadata": {"name": name},
                "spec": {"model": model, "adapter": target}}  # fmt: skip

    docs = [
        adapter("demo-zebra-v1", "zebra"),
        adapter("demo-zebra-v2", "zebra"),
        adapter("acme-bot-v1", None, "ACME-1"),
        adapter("x-unknown-v1", "unknown"),
        alias("demo/zebra:prod", "demo-zebra-v1"),
        alias("acme/bot:prod", "acme-bot-v1"),
        alias("x/u:prod", "x-unknown-v1"),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "otter.yaml").write_text(
        yaml.safe_dump({"kind": "List", "items": [adapter("demo-otter-v1", "otter"),
                                                  alias("demo/o:prod", "demo-otter-v1")]})
    )  # fmt: skip
    found = markers_from_manifests(tmp_path)
    assert found == {"demo/zebra:prod": "ZEBRA-7", "acme/bot:prod": "ACME-1",
                     "demo/o:prod": "OTTER-9"}  # fmt: skip
    # The reconciler's alias status says what serves: that adapter's marker is expected.
    (tmp_path / ".lorafleet").mkdir()
    (tmp_path / ".lorafleet" / "alias-status.json").write_text(
        '{"demo-zebra-prod": {"adapter": "demo-otter-v1"}}'
    )
    assert markers_from_manifests(tmp_path)["demo/zebra:prod"] == "OTTER-9"


def test_plots_are_written(tmp_path: Path):
    assert per_second([0.1, 0.2, 1.5, 3.9], span_s=4.0, bin_s=2.0) == [1.5, 0.5]
    assert per_second([0.1, 9.0], span_s=4.0, bin_s=2.0) == [0.5, 0.5]  # late: last bin
    results = [ok_result(i, 0.02 + 0.01 * i, ("gpu", "ram", "disk")[i % 3]) for i in range(30)]
    results.append(RequestResult(30, "a", 30.0, 30.0, "429"))
    path = write_plots(results, tmp_path / "out" / "lt.png", "title")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG")
    assert len(data) > 20_000


def test_canary_tally_reports_switches_and_verdict():
    tally = canary_probe.AliasTally()
    first = ok_result(0, 0.03, "gpu")
    assert canary_probe.record(tally, first) is None
    moved = ok_result(1, 0.05, "remote")
    moved.adapter_id = "a-v2"
    assert canary_probe.record(tally, moved) == "SWITCH a: a-v1 -> a-v2"
    wrong = ok_result(2, 0.05, "gpu", marker_ok=False)
    assert canary_probe.record(tally, wrong) == "SWITCH a: a-v2 -> a-v1"
    assert canary_probe.record(tally, RequestResult(3, "a", 0, 0, "503")) is None
    assert (tally.hits, tally.misses, tally.errors, tally.switches) == (2, 1, 1, 2)
    assert tally.tiers == {"gpu": 2, "remote": 1}
    assert canary_probe.verdict({"a": tally}, 1.0) == 1  # a wrong marker
    tally.misses = 0
    assert canary_probe.verdict({"a": tally}, 0.5) == 0
    assert canary_probe.verdict({"a": tally}, 0.1) == 1  # 1 error in 4 probes
    report = canary_probe.format_report({"a": tally})
    assert "a-v1 -> a-v2 -> a-v1 (2)" in report


def test_reproduce_command_hides_the_api_key():
    cmd = reproduce_command("e2e.loadtest", ["--api-key", "lf-secret", "--rate", "2"])
    assert "lf-secret" not in cmd
    assert cmd.endswith('-m e2e.loadtest --api-key "$LORAFLEET_API_KEY" --rate 2')
    assert "lf-x" not in reproduce_command("e2e.canary_probe", ["--api-key=lf-x"])
