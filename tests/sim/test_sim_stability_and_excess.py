"""A run that falls behind is no result; TTFT splits into its floor and where the rest went;
the prefill a trace's busiest seconds bring."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from lorafleet_sim.burst import burst
from lorafleet_sim.capacity import meets, search
from lorafleet_sim.engine import Engine
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.report import EXCESS_PARTS, Summary, detail, idle_ttft, summarize, table
from lorafleet_sim.workload import Mix, build
from tests.sim.hand_made import requests

RP = ReplicaParams()
ONE = FleetParams(replicas=1, owners_per_adapter=1, gateways=1, prewarm=False)
# ~5,600 prompt tokens/s and ~1,360 output tokens/s: one replica falls far behind.
WORKLOAD = build(mix=Mix.zipf(200, 1.0), rate=6, duration_s=300, seed=3)


def test_an_overloaded_fleet_is_unstable_and_shown_as_no_result():
    s = summarize("one replica", Engine(WORKLOAD, RP, replace(ONE, replicas=1)).run(), 60)
    assert s["stable"] is False
    assert s["backlog_at_end"] > s["sequence_slots_at_end"] == RP.max_seqs
    row = table([s]).splitlines()[-1]
    assert "unstable" in row
    assert f"{s['ttft_p95_ms']:.0f} ms" not in row
    assert "UNSTABLE, not a result" in detail(s)
    # Its worst adapter may still look fine to a search reading TTFT alone: it never meets.
    looks_fine = Summary("x", s.figures | {"worst_adapter_p95_ms": 10.0, "gpu_hit_pct": 100.0})
    assert not meets(looks_fine, 1000)


def test_a_fleet_with_room_is_stable_and_the_capacity_search_skips_unstable_counts():
    # 20 adapters: all resident soon, GPU hits ~99%. An SLO of an hour: every count "meets"
    # on TTFT alone, so only stability separates them (1-3 replicas fall behind: ~5,600
    # prompt tokens/s and ~60 sequences' worth of decodes, more at the owners of the head).
    w = build(mix=Mix.zipf(20, 1.0), rate=6, duration_s=300, seed=3)
    fp = FleetParams(slo_ttft_s=3600.0)
    found, tried = search(w, RP, fp, router="affinity", seed=0, low=1, high=6, measure_from=60)
    assert tried[6]["stable"] is True
    assert tried[6]["backlog_at_end"] <= tried[6]["sequence_slots_at_end"]
    assert found is not None
    assert found > 1
    assert not tried[found - 1]["stable"]
    assert tried[found - 1]["worst_adapter_p95_ms"] < 3_600_000  # it would have "met"
    assert all(s["stable"] for n, s in tried.items() if n >= found)


def test_idle_ttft_is_the_prompts_own_chunks_on_an_empty_replica():
    prompts = np.array([100, 2048, 5000])
    floor = idle_ttft(RP, prompts)
    # 100 tokens: one step, a decode step is longer; 5,000: 2,048 + 2,048 + 904 tokens
    assert floor == pytest.approx([RP.decode_s, 2048 / RP.prefill_tps, 5000 / RP.prefill_tps])
    w = requests((0.0, 1000, 4, 0), (5.0, 1000, 4, 0), (5.0, 3000, 4, 0))
    eng = Engine(w, RP, ONE).run()
    ttft = np.asarray(eng.first_token) - np.asarray(eng.arrival)
    # The second request, alone on the replica with its adapter resident, is at its floor.
    assert ttft[1] == pytest.approx(idle_ttft(RP, np.array([1000]))[0])
    # The third shares its first step with the second's prompt: 1,000 of 2,048 tokens.
    excess_third = ttft[2] - idle_ttft(RP, np.array([3000]))[0]
    # (and the decode tokens of the second, one a step)
    assert excess_third == pytest.approx(1000 / RP.prefill_tps, abs=3 / RP.prefill_tps)


def test_the_excess_parts_add_up_to_ttft_minus_the_floor():
    eng = Engine(WORKLOAD, RP, FleetParams(replicas=6)).run()
    s = summarize("x", eng, 60)
    ttft = np.asarray(eng.first_token) - np.asarray(eng.arrival)
    assert s["stable"] is True
    assert s["excess_by_adapter"]
    for label in ("0-512", "512-2048", "2048-4096", "4096+"):
        parts = [s[f"tail_{p}_prompt_{label}_ms"] for p in EXCESS_PARTS]
        assert min(parts) >= -1e-6
        assert s[f"excess_p95_prompt_{label}_ms"] > 0
    # Per adapter: the worst excess is the largest of those reported, and under its TTFT p95.
    per = s["excess_by_adapter"]
    worst = max(v["excess_p95_ms"] for v in per.values())
    assert s["worst_adapter_excess_p95_ms"] == worst
    assert per[s["worst_excess_adapter"]]["ttft_p95_ms"] >= worst
    assert float(np.nanmax(ttft)) * 1000 >= worst


def test_burst_reads_the_prompt_tokens_of_each_second():
    w = requests((0.2, 1000, 1, 0), (0.7, 3000, 1, 0), (2.5, 500, 1, 0), (3.1, 100, 1, 0))
    b = burst(w)
    assert b.seconds == 4  # seconds 0..3, second 1 empty
    assert b.max_tps == 4000
    assert b.mean_tps == pytest.approx(4600 / 4)
    assert b.empty_pct == pytest.approx(25.0)
    assert b.replicas(b.max_tps, 8000) == 1
    assert b.replicas(b.max_tps, 3000) == 2
    assert "95th percentile second" in b.line(8000)
    assert burst(w, measure_from=2.0).max_tps == 500


def test_long_prefill_threshold_lets_a_short_prompt_past_a_long_ones_chunks():
    # Adapter resident (a first request), then a 6,000-token prompt and, while its first
    # chunk is in progress, a 100-token one.
    w = requests((0.0, 1, 1, 0), (10.0, 6000, 2, 0), (10.01, 100, 2, 0))
    capped_rp = replace(RP, long_prefill_token_threshold=512)
    uncapped = Engine(w, RP, ONE).run()
    capped = Engine(w, capped_rp, ONE).run()

    def short_ttft(eng: Engine) -> float:
        return eng.first_token[2] - eng.arrival[2]

    # Uncapped: behind the long prompt's 2,048-token steps until its last one has room.
    assert short_ttft(uncapped) > 2 * 2048 / RP.prefill_tps
    # Capped at 512: it joins the step after the one in progress, 512 + 100 tokens.
    assert short_ttft(capped) == pytest.approx((512 + 612) / RP.prefill_tps - 0.01)
    # The long prompt's own floor: 11 steps of 512 tokens and one decode-length step.
    floor = idle_ttft(capped_rp, np.array([6000]))[0]
    assert floor == pytest.approx(11 * 512 / RP.prefill_tps + RP.decode_s)
