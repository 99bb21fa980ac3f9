"""Workloads: the trace compressed to a rate and repeated, Zipf and tenant-mix popularity."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.workload import WorkloadSpec, load_workload
from lorafleet_sim.workload import Mix, build, read_mix


def test_trace_is_compressed_to_the_rate_and_repeated_to_the_duration():
    w = build(mix=Mix.zipf(500, 1.0), rate=40, duration_s=900, seed=3)
    assert all(a <= b for a, b in itertools.pairwise(w.at))
    assert len(w) / 900 == pytest.approx(40, rel=0.05)  # 19,366 rows per pass, ~8 min each
    assert w.at[-1] < 900
    assert "seed 3" in w.label
    assert build(mix=Mix.zipf(500, 1.0), rate=40, duration_s=900, seed=3).adapter == w.adapter


def test_zipf_mix_skews_to_rank_one():
    w = build(mix=Mix.zipf(500, 1.0), rate=10, duration_s=400, seed=1)
    counts = Counter(w.adapter)
    assert counts.most_common(1)[0][0] == 0
    # Zipf(1) over 500 ranks gives rank 1 about 1/H(500) ~ 14.7% of requests.
    assert 0.11 < counts[0] / len(w) < 0.19


def test_poisson_arrivals_hit_the_rate():
    w = build(mix=Mix.zipf(50, 1.0), rate=20, duration_s=300, seed=2, poisson=True)
    assert len(w) / 300 == pytest.approx(20, rel=0.1)


def test_tenant_mix_file_with_a_hot_tenant_in_generated_tokens(tmp_path: Path):
    mix_file = tmp_path / "mix.csv"
    mix_file.write_text("tenant,share,tokens_per_s\nacme,3,\nglobex,1,\nhot,,250\n")
    mix = read_mix(mix_file, rate=10, mean_output=100)
    shares = dict(zip(mix.names, mix.weights, strict=True))
    total = sum(shares.values())
    assert shares["hot"] / total == pytest.approx(250 / (10 * 100))  # a quarter of requests
    assert shares["acme"] / shares["globex"] == pytest.approx(3)


def test_the_benchmark_workload_reads_the_trace_through_the_simulator():
    reqs = load_workload(WorkloadSpec(limit=2000, seed=3))
    plain = load_workload(WorkloadSpec(limit=2000, speedup=1.0, seed=3))
    assert len(reqs) == 2000
    assert abs(reqs[-1].at * 7 - plain[-1].at) < 1e-6
    assert [r.adapter for r in reqs] == [r.adapter for r in plain]
