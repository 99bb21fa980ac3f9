"""`lorafleet loadtest`'s pure parts: the replay plan, the statistics, overhead rows, reports,
plots, and the command's usage errors (exit 2 before anything is sent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorafleet_cli.main import main as cli
from lorafleet_core.stats import percentile
from lorafleet_loadtest import overhead as oh
from lorafleet_loadtest import plots, report
from lorafleet_loadtest.plan import (
    LengthLimits,
    ReplaySpec,
    TraceRequest,
    plan_replay,
    prompt_text,
    scale_length,
    scale_requests,
)
from lorafleet_loadtest.probe.client import DEFAULT_MANIFESTS, manifests_for
from lorafleet_loadtest.probe.results import RequestResult
from lorafleet_loadtest.stats import stats_to_json, summarize, tpot_s, verdict
from lorafleet_sim.workload import default_trace

TRACE = default_trace()


def ok(
    i: int,
    ttft: float,
    tier: str,
    *,
    alias: str = "a",
    total: float | None = None,
    tokens: int = 5,
    marker_ok: bool | None = True,
) -> RequestResult:
    return RequestResult(
        i, alias, float(i), float(i), "200", ttft_s=ttft,
        total_s=ttft + 0.1 if total is None else total, completion_tokens=tokens, tier=tier,
        replica="r0", adapter_id=f"{alias}-v1", text="ZEBRA-7", marker_ok=marker_ok,
    )  # fmt: skip


def test_scale_length_keeps_order_and_bounds():
    assert scale_length(0, 32, 0.5) == 1
    assert scale_length(10, 32, 0.5) == 5
    assert scale_length(1000, 32, 0.5) == 32
    assert scale_length(2, 32, 0.5, floor=8) == 8
    assert [scale_length(n, 64, 0.1) for n in (10, 100, 400, 5000)] == [1, 10, 40, 64]


def test_scale_requests_maps_ranks_onto_aliases_and_lengths_onto_the_caps():
    trace = [TraceRequest(10.0, 100, 10, 1), TraceRequest(11.0, 4000, 400, 2),
             TraceRequest(12.5, 2000, 200, 1)]  # fmt: skip
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


def test_replay_of_the_real_trace_offers_the_asked_rate_skewed_and_seeded():
    aliases = [f"t/a{i}:prod" for i in range(8)]
    spec = ReplaySpec(TRACE, rate=4.0, duration_s=60.0, max_requests=1000, zipf_s=1.0, seed=0)
    plan = plan_replay(spec, aliases, LengthLimits())
    assert plan == plan_replay(spec, aliases, LengthLimits())  # deterministic per seed
    assert all(0 <= p.at <= 60.0 for p in plan)
    # Calibrated on the window sent: the offered rate is the asked one, not the trace's mean.
    assert (len(plan) - 1) / plan[-1].at == pytest.approx(4.0, rel=0.02)
    assert all(p.prompt_tokens + p.max_tokens <= 256 - 16 for p in plan)
    counts = [sum(p.alias == a for p in plan) for a in aliases]
    assert counts[0] > 2 * counts[-1]  # Zipf: the first alias is the hottest
    # Twice the rate over the same duration: about twice the requests, the same mix.
    faster = plan_replay(ReplaySpec(TRACE, 8.0, 60.0, 1000), aliases, LengthLimits())
    assert len(faster) == pytest.approx(2 * len(plan), rel=0.1)
    capped = plan_replay(ReplaySpec(TRACE, 8.0, 60.0, 50), aliases, LengthLimits())
    assert len(capped) == 50
    with pytest.raises(ValueError, match="no aliases"):
        plan_replay(spec, [], LengthLimits())


def test_prompt_text_has_about_the_asked_length():
    assert len(prompt_text(48, 0, 2.4).split()) == 20
    assert prompt_text(10, 1, 2.4) != prompt_text(10, 2, 2.4)


def test_percentiles_are_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_time_per_output_token_spreads_the_stream_after_the_first_token():
    assert tpot_s(ok(0, 0.1, "gpu", total=1.1, tokens=11)) == pytest.approx(0.1)
    assert tpot_s(ok(0, 0.1, "gpu", total=1.1, tokens=1)) is None  # one token: no TPOT
    assert tpot_s(RequestResult(0, "a", 0, 0, "503")) is None


def test_summary_splits_by_tier_and_alias_and_counts_429s_apart():
    results = [ok(i, 0.01 * (i + 1), "gpu", alias="hot") for i in range(8)]
    results += [ok(8, 0.5, "remote", alias="cold"), ok(9, 0.2, "disk", marker_ok=False)]
    results += [RequestResult(10, "hot", 10.0, 10.0, "503"),
                RequestResult(11, "hot", 11.0, 11.0, "429"),
                RequestResult(12, "hot", 12.0, 12.0, "429")]  # fmt: skip
    s = summarize(results, elapsed_s=10.0, planned_span_s=13.0, label="x")
    assert (s.requests, s.ok, s.error_count, s.rate_limited) == (13, 10, 3, 2)
    assert s.errors == {"429": 2, "503": 1}
    assert [t.tier for t in s.tiers] == ["gpu", "disk", "remote"]  # the design's tier order
    assert sum(t.ttft.n for t in s.tiers) == s.ok
    assert sum(t.share for t in s.tiers) == pytest.approx(1.0)
    assert s.gpu_share == pytest.approx(0.8)
    gpu = s.tiers[0]
    assert (gpu.ttft.p50, gpu.ttft.p95, gpu.ttft.p99) == (0.04, 0.08, 0.08)
    assert s.ttft.p99 == 0.5
    assert s.aliases["hot"].n == 8
    assert s.worst_alias() == ("cold", 0.5)
    assert s.achieved_rps == pytest.approx(1.0)
    assert s.offered_rps == pytest.approx(1.0)
    assert s.mismatches == 1
    doc = stats_to_json(s)
    assert doc["tiers"]["gpu"]["ttft"] == {"n": 8, "p50_ms": 40.0, "p95_ms": 80.0, "p99_ms": 80.0}
    assert doc["rate_limited"] == 2
    json.dumps(doc)  # plain JSON
    assert verdict([s], max_error_rate=0.5) == 1  # a wrong marker always fails
    clean = summarize([r for r in results if r.marker_ok is not False], elapsed_s=10.0,
                      planned_span_s=13.0)  # fmt: skip
    assert verdict([clean], max_error_rate=0.5) == 0
    assert verdict([clean], max_error_rate=0.05) == 1  # 3 errors in 12
    assert verdict([], max_error_rate=1.0) == 1  # nothing ran


def _round(n: int, seconds: float, tier: str = "gpu") -> tuple[list[RequestResult], float]:
    return [ok(i, 0.1, tier, tokens=64) for i in range(n)], seconds


def test_overhead_rows_compare_with_the_base_model_round_by_round():
    base_rounds = [_round(10, 2.0, ""), _round(5, 2.0, ""), _round(10, 2.0, "")]
    base = oh.throughput_row("base", 0, base_rounds)
    eight = oh.throughput_row("8 adapters", 8, [_round(8, 2.0), _round(4, 2.0), _round(6, 2.0)])
    assert base.rounds == (320.0, 160.0, 320.0)
    assert base.tokens_per_s == 320.0  # the median round
    assert base.gpu_share is None  # the base model has no adapter tier
    # Paired by round (the machine slowed down in round 2 for both): 20%, 20%, 40% -> 20%.
    assert oh.overhead(eight, base) == pytest.approx(0.2)
    assert oh.overhead(eight, None) is None
    rows = oh.rows_to_json([base, eight])
    assert rows[1]["overhead_vs_base"] == pytest.approx(0.2)
    assert rows[1]["rounds_tokens_per_s"] == [256.0, 128.0, 192.0]
    assert rows[1]["gpu_share"] == 1.0
    assert rows[1]["ok"] == 18


def test_overhead_says_when_the_deployment_has_too_few_aliases():
    assert oh.missing_aliases([1, 8], 8) is None
    why = oh.missing_aliases([1, 8, 32], 12)
    assert why is not None
    assert "needs 32 aliases" in why
    assert "lists 12" in why


def test_an_overhead_run_passes_only_when_every_row_answered_within_the_error_rate():
    fine = {"requests": 20, "ok": 19}
    assert oh.rows_passed([fine, {"requests": 10, "ok": 10}], max_error_rate=0.05)
    assert not oh.rows_passed([], max_error_rate=0.05)  # nothing measured
    assert not oh.rows_passed([fine, {"requests": 5, "ok": 0}], max_error_rate=1.0)
    assert not oh.rows_passed([fine, {"requests": 10, "ok": 9}], max_error_rate=0.05)


def _doc(label: str, gpu: float) -> dict[str, object]:
    results = [ok(i, 0.05, "gpu" if i < 10 * gpu else "disk", alias=f"a{i % 3}") for i in range(10)]
    s = summarize(results, elapsed_s=5.0, planned_span_s=5.0)
    run = {"rate": 2.0, "describe": "d", **stats_to_json(s)}
    return report.document({"label": label, "gateway": "http://gw"}, [run], None)


def test_markdown_and_comparison_come_from_the_json_document(tmp_path: Path):
    doc = _doc("affinity", 0.9)
    text = report.markdown(doc)
    assert "# lorafleet loadtest: affinity" in text
    assert "## Rate sweep by tier" in text
    assert "| 2.00 | 2.00 | all | 10 | 100.0% |" in text
    assert "|  |  | gpu | 9 | 90.0% |" in text
    assert "## p95 TTFT per alias" in text
    path = tmp_path / "a.json"
    path.write_text(json.dumps(doc))
    rows = report.compare_rows([report.read_document(path), _doc("random", 0.5)])
    assert [(r["label"], r["gpu_share"]) for r in rows] == [("affinity", 0.9), ("random", 0.5)]
    table = report.compare_markdown(rows)
    assert "| affinity | 2.00 | 10 | 0 | 90.0% |" in table
    (tmp_path / "other.json").write_text('{"runs": []}')
    with pytest.raises(ValueError, match="not a lorafleet loadtest result"):
        report.read_document(tmp_path / "other.json")


def test_plots_are_pngs_small_enough_to_commit(tmp_path: Path):
    assert plots.per_second([0.1, 0.2, 1.5, 3.9], span_s=4.0, bin_s=2.0) == [1.5, 0.5]
    assert plots.per_second([0.1, 9.0], span_s=4.0, bin_s=2.0) == [0.5, 0.5]  # late: last bin
    results = [ok(i, 0.02 + 0.01 * i, ("gpu", "ram", "disk")[i % 3]) for i in range(30)]
    results.append(RequestResult(30, "a", 30.0, 30.0, "429"))
    doc = _doc("x", 0.7)
    base = oh.throughput_row("base", 0, [_round(10, 2.0, "")])
    one = oh.throughput_row("1 adapter", 1, [_round(9, 2.0)])
    written = [
        plots.write_plots(results, tmp_path / "out" / "lt.png", "title"),
        plots.plot_sweep(doc["runs"], tmp_path / "sweep.png", "t"),  # type: ignore[arg-type]
        plots.plot_overhead(oh.rows_to_json([base, one]), tmp_path / "overhead.png", "t"),
        plots.plot_compare(report.compare_rows([doc, _doc("y", 0.3)]), tmp_path / "c.png", "t"),
    ]
    for path in written:
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG"), path
        assert 10_000 < len(data) < 200_000, (path, len(data))


@pytest.mark.parametrize(
    "args",
    [
        ["--rates", "0,2"],
        ["--rates", "fast"],
        ["--adapter-counts", "1,x"],
        ["--max-prompt-tokens", "300"],
        ["--duration", "0"],
        ["--key-file", "/nonexistent/key"],
        ["--trace", "/nonexistent/trace.csv"],
    ],
    ids=["zero-rate", "bad-rate", "bad-count", "too-long", "no-duration", "no-key", "no-trace"],
)
def test_bad_arguments_exit_2_before_anything_is_sent(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("LORAFLEET_API_KEY", raising=False)
    key = tmp_path / "key"
    key.write_text("lf-key\n")
    argv = ["loadtest", "--gateway", "http://127.0.0.1:9", "--key-file", str(key), *args]
    try:
        rc = cli(argv)
    except SystemExit as exc:  # argparse's own usage errors
        rc = int(exc.code or 0)
    assert rc == 2


def test_compare_needs_readable_result_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_doc("affinity", 0.9)))
    assert cli(["loadtest", "--compare", str(a), "--out", str(tmp_path)]) == 2
    assert cli(["loadtest", "--compare", str(a), str(tmp_path / "none.json")]) == 2
    b = tmp_path / "b.json"
    b.write_text(json.dumps(_doc("random", 0.4)))
    out = tmp_path / "cmp"
    assert cli(["loadtest", "--compare", str(a), str(b), "--out", str(out)]) == 0
    assert "| random | 2.00 | 10 | 0 | 40.0% |" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"compare.md", "compare.json", "compare.png"}


def test_canary_and_loadtest_read_up_s_manifests_only_for_up_s_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert manifests_for("http://127.0.0.1:8080", None) is None  # no folder yet
    (tmp_path / DEFAULT_MANIFESTS).mkdir(parents=True)
    assert manifests_for("http://127.0.0.1:8080", None) == DEFAULT_MANIFESTS
    assert manifests_for("http://127.0.0.1:8080/v1/", None) == DEFAULT_MANIFESTS
    assert manifests_for("https://gw.example", None) is None  # not that folder's aliases
    assert manifests_for("https://gw.example", tmp_path / "m") == tmp_path / "m"
