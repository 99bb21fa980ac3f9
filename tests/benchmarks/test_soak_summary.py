"""The soak's verdict from samples and results (pure): RSS slope and growth flag, statuses, TTFT
by phase, slow-client outcomes; and the sampler's process tree on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from benchmarks.soak_report import passed, phase_of, verdict
from benchmarks.soak_rss import (
    Mapping,
    RssSample,
    RssSampler,
    fit_slope,
    mapping_growth,
    summarize_rss,
)
from benchmarks.soak_slow import SlowResult
from lorafleet_loadtest.probe.results import RequestResult


def series(label: str, values: list[float], step_s: float = 10.0) -> list[RssSample]:
    return [RssSample(i * step_s, label, 100, v) for i, v in enumerate(values)]


def test_fit_slope_recovers_a_line_and_is_zero_for_one_point():
    assert fit_slope([0, 1, 2, 3], [5, 7, 9, 11]) == pytest.approx(2.0)
    assert fit_slope([1.0], [3.0]) == 0.0
    assert fit_slope([2.0, 2.0], [1.0, 5.0]) == 0.0


def test_steady_climb_after_warmup_is_flagged_growing_with_its_slope():
    # 200 MiB, +1 MiB every 10 s for 10 min: 6 MiB/min, a 59 MiB rise after a 60 s warm-up.
    samples = series("gateway", [200.0 + i for i in range(61)])
    (s,) = summarize_rss(samples, warmup_s=60, min_rise_mib=16, rel_rise=0.05)
    assert s.slope_mib_per_min == pytest.approx(6.0)
    assert s.late_slope_mib_per_min == pytest.approx(6.0)
    assert s.rise_mib == pytest.approx(54.0)
    assert (s.first_mib, s.last_mib, s.max_mib) == (200.0, 260.0, 260.0)
    assert s.growing


def test_flat_noise_and_a_rise_that_ends_in_a_plateau_are_not_growing():
    noisy = series("agent", [150.0 + (3.0 if i % 2 else -3.0) for i in range(61)])
    # The engine touching its KV cache for the first time: +300 MiB over 4 min, then flat.
    plateau = series("vllm>Worker", [1700.0 + min(i, 24) * 12.5 for i in range(61)])
    summaries = summarize_rss(noisy + plateau, warmup_s=60, min_rise_mib=16, rel_rise=0.05)
    by = {s.label: s for s in summaries}
    assert not by["agent"].growing
    assert by["vllm>Worker"].rise_mib > 100  # the whole-window line rises ...
    assert by["vllm>Worker"].late_slope_mib_per_min == pytest.approx(0.0)  # ... then stops
    assert not by["vllm>Worker"].growing


def test_a_small_rise_in_a_big_process_is_within_the_relative_allowance():
    # +40 MiB over 10 min in a 3 GiB engine: above 16 MiB, below 5% of 3 GiB.
    samples = series("vllm", [3072.0 + 40.0 * i / 60 for i in range(61)])
    (s,) = summarize_rss(samples, warmup_s=0, min_rise_mib=16, rel_rise=0.05)
    assert s.rise_mib == pytest.approx(40.0)
    assert not s.growing


def test_restart_shows_as_a_second_pid():
    samples = [RssSample(0, "agent", 1, 60), RssSample(2, "agent", 2, 61)]
    (s,) = summarize_rss(samples, warmup_s=0)
    assert s.pids == [1, 2]


def _result(i: int, status: str, started_at: float, ttft_s: float | None) -> RequestResult:
    return RequestResult(
        i, "a", started_at, started_at, status, ttft_s=ttft_s, total_s=ttft_s, marker_ok=True
    )


def test_verdict_counts_5xx_splits_ttft_by_phase_and_fails_on_any_5xx():
    results = [
        _result(0, "200", 1.0, 0.1),
        _result(1, "200", 15.0, 0.3),
        _result(2, "200", 25.0, 0.2),
        _result(3, "429", 26.0, None),
    ]
    slow = [
        SlowResult("headers", 0, 10.0, 10.0, "408"),
        SlowResult("body", 1, 10.0, 30.0, "408"),
        SlowResult("reader", 2, 10.0, 5.0, "200", complete=True),
    ]
    v = verdict(results, slow, [], elapsed_s=30.0, slow_window=(10.0, 20.0))
    assert v["statuses"] == {"200": 3, "429": 1}
    assert v["status_5xx"] == 0
    assert {k: t["n"] for k, t in v["ttft"].items()} == {
        "all": 3,
        "before": 1,
        "during": 1,
        "after": 1,
    }
    assert v["ttft"]["during"]["p50_ms"] == 300.0
    assert v["slow_clients"] == {
        "body": {"408": 1},
        "headers": {"408": 1},
        "reader": {"200 complete": 1},
    }
    assert v["slow_cut_s"] == {"headers": 10.0, "body": 30.0}
    assert passed(v)
    failing = verdict(
        [*results, _result(4, "503", 27.0, None)], slow, [], elapsed_s=30.0, slow_window=None
    )
    assert failing["status_5xx"] == 1
    assert not passed(failing)
    assert phase_of(5.0, None) == "no slow clients"


def test_verdict_fails_when_a_process_grows():
    rss = summarize_rss(series("gateway", [200.0 + i for i in range(61)]), warmup_s=0)
    v = verdict([_result(0, "200", 0.0, 0.1)], [], rss, elapsed_s=1.0, slow_window=None)
    assert v["rss_growing"] == ["gateway"]
    assert not passed(v)


def test_sampler_labels_children_and_leaves_other_roots_children_to_them():
    # This process -> child "a" (a root of its own) -> grandchild; the grandchild is a's.
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
        "print(p.pid, flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    grandchild = 0
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        sampler = RssSampler(lambda: {"tests": os.getpid(), "a": child.pid}, 1.0)
        sampler.sample_once()
        by_pid = {s.pid: s.label for s in sampler.samples}
        assert by_pid[os.getpid()] == "tests"
        assert by_pid[child.pid] == "a"
        assert by_pid[grandchild].startswith("a>")
        assert all(s.rss_mib > 1 for s in sampler.samples)
    finally:
        if grandchild:
            os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_mapping_growth_names_the_mapping_that_filled_up_first():
    start = {"a-b": Mapping("[anon]", 1024.0, 100.0), "c-d": Mapping("[heap]", 50.0, 40.0)}
    end = {
        "a-b": Mapping("[anon]", 1024.0, 480.0),  # a preallocated buffer being touched
        "c-d": Mapping("[heap]", 52.0, 42.0),
        "e-f": Mapping("/lib/x.so", 2.0, 1.0),  # new since the start
    }
    rows = mapping_growth(start, end, top=2)
    assert [(r["addr"], r["grown_mib"]) for r in rows] == [("a-b", 380.0), ("c-d", 2.0)]
    assert rows[0]["size_mib"] == 1024.0
    assert rows[0]["rss_before_mib"] == 100.0
