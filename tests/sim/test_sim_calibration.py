"""Calibration against the real stack, the pure parts: one replay feeds both sides, the error
computation, the measured parameters, and the two replica-model terms calibration added
(vLLM's --max-loras cap on running adapters, the fixed request path)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from benchmarks.sim_calibration_report import FLEET, measured_params
from lorafleet_sim import calibration as cal
from lorafleet_sim.engine import Engine
from lorafleet_sim.params import FleetParams, ReplicaParams
from tests.sim.hand_made import requests


def row(at: float, adapter: str, **kw: Any) -> dict[str, Any]:
    base = {
        "scheduled_at": at,
        "adapter": adapter,
        "engine_prompt_tokens": 40,
        "planned_prompt_tokens": 30,
        "prompt_tokens": 40,
        "completion_tokens": 12,
        "max_tokens": 16,
        "status": "200",
        "tier": "gpu",
        "ttft_s": 0.05,
    }
    return base | kw


def test_the_replay_and_its_simulated_workload_are_the_same_requests():
    rows = [
        row(0.5, "demo-b", engine_prompt_tokens=70, completion_tokens=9),
        row(0.0, "demo-a"),
        row(1.0, "demo-a", status="503", ttft_s=None, completion_tokens=None, max_tokens=16),
    ]
    reqs = cal.replayed(rows)
    w = cal.workload_of(reqs)
    assert w.at == [0.0, 0.5, 1.0]  # send order
    assert [w.names[i] for i in w.adapter] == ["demo-a", "demo-b", "demo-a"]
    assert w.prompt == [40, 70, 40]  # the engine's token counts, not the planner's 30
    assert w.output == [12, 9, 16]  # generated; max_tokens for the failed one
    assert reqs[2].tier is None  # failed: not in the figures
    assert reqs[2].ttft_s is None


def test_out_of_order_requests_are_refused():
    reqs = [cal.Replayed(1.0, "a", 1, 1), cal.Replayed(0.0, "a", 1, 1)]
    with pytest.raises(ValueError, match="send order"):
        cal.workload_of(reqs)


def test_figures_use_nearest_rank_percentiles_and_shares_after_measure_from():
    at = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    ttft = [9.0, 0.1, 0.2, 0.3, 0.4, None]
    tier = ["remote", "gpu", "gpu", "ram", "disk", None]
    f = cal.figures(at, ttft, tier, measure_from=1.0)  # the 9 s warm-up request is left out
    assert f["requests"] == 4
    assert f["ttft_p50_ms"] == pytest.approx(200)
    assert f["ttft_p95_ms"] == pytest.approx(400)
    assert (f["gpu_pct"], f["ram_pct"], f["disk_pct"], f["remote_pct"]) == (50, 25, 25, 0)
    assert math.isnan(f["ttft_p50_remote_ms"])


def test_predicted_figures_read_the_engine_arrays_like_the_measured_ones():
    f = cal.predicted_figures([0.0, 1.0], [0.25, math.nan], [0, -1], 0.0)
    assert f["requests"] == 1
    assert f["ttft_p50_ms"] == pytest.approx(250)
    assert f["gpu_pct"] == 100


def test_compare_gives_relative_ttft_error_and_share_points():
    measured = {"ttft_p50_ms": 100.0, "ttft_p95_ms": 200.0, "gpu_pct": 60.0, "ram_pct": 5.0}
    predicted = {"ttft_p50_ms": 110.0, "ttft_p95_ms": 150.0, "gpu_pct": 75.0, "ram_pct": 6.5}
    rows = {r.name: r for r in cal.compare(measured, predicted)}
    assert rows["TTFT p50"].error == pytest.approx(0.10)
    assert rows["TTFT p50"].within_target
    assert rows["TTFT p95"].error == pytest.approx(-0.25)
    assert not rows["TTFT p95"].within_target
    assert rows["gpu share"].error == pytest.approx(15.0)
    assert not rows["gpu share"].within_target  # 20% of 60% is 12 points
    assert rows["ram share"].within_target  # 1.5 points: under the 2-point floor
    assert "| TTFT p95 | 200 ms | 150 ms | -25% | **no** |" in cal.table(list(rows.values()))


def test_measured_parameters_come_from_the_probes():
    doc = {
        "tiers": {"median_s": {"gpu": 0.027, "ram": 0.023, "disk": 0.038, "remote": 0.057}},
        "decode": {"fit_s": [0.018, 0.002], "batches": {}},
        "prefill": {
            "prefill_tps": 50_000.0,
            "prefill_fit_s": [0.012, 2e-5],
            "rows": [
                {"client_ttft_s": 0.030, "vllm_prefill_s": 0.018},
                {"client_ttft_s": 0.032, "vllm_prefill_s": 0.020},
                {"client_ttft_s": 0.090, "vllm_prefill_s": 0.020},  # a stall: the median holds
            ],
        },
    }
    m = measured_params(doc)
    assert m["ram_s"] == 0.0  # faster than the GPU median by noise: clamped
    assert m["disk_s"] == pytest.approx(0.011)
    assert m["remote_s"] == pytest.approx(0.030)
    assert (m["decode_s"], m["decode_s_per_seq"]) == (0.018, 0.002)
    assert m["path_s"] == pytest.approx(0.012)  # client TTFT - the engine's prefill step
    rp, fp = cal.sim_params(m, FLEET)
    assert (rp.gpu_slots, rp.ram_slots, rp.max_seqs, fp.replicas, fp.gateways) == (2, 4, 128, 1, 1)
    assert (rp.prefill_tps, rp.prefill_step_s, rp.decode_s_per_seq) == (50_000.0, 0.012, 0.002)
    assert rp.path_s == pytest.approx(0.012)


ONE = FleetParams(replicas=1, owners_per_adapter=1, gateways=1)


def test_an_adapter_beyond_max_loras_waits_until_a_running_one_finishes():
    # One GPU slot, room for 8 sequences: b's request is skipped while a's runs (vLLM's
    # max_loras check), while a later request of a goes ahead of it.
    rp = replace(ReplicaParams(), gpu_slots=1, ram_slots=4, max_seqs=8, decode_s=0.01, ram_s=0.0)
    w = requests((0.0, 10, 5, 0), (0.001, 10, 1, 1), (0.002, 10, 1, 0))
    eng = Engine(w, rp, ONE).run()
    a_done = eng.finish_time[0]
    assert eng.first_token[1] > a_done  # b only after a's last sequence ended
    assert eng.first_token[2] < a_done  # a's second request did not wait
    roomy = Engine(w, replace(rp, gpu_slots=2), ONE).run()
    assert roomy.first_token[1] < roomy.finish_time[0]  # two slots: b runs beside a


def test_the_request_path_adds_to_ttft_only():
    rp = replace(ReplicaParams(), ram_s=0.0)
    w = requests((0.0, 100, 3, 0))
    base = Engine(w, rp, ONE).run()
    slow = Engine(w, replace(rp, path_s=0.02), ONE).run()
    assert slow.first_token[0] - base.first_token[0] == pytest.approx(0.02)
    assert slow.finish_time[0] == pytest.approx(base.finish_time[0])


def test_a_cpu_decode_step_grows_with_the_running_batch():
    # 18 ms + 2 ms per running sequence: alone 20 ms a token, beside 4 others 28 ms.
    rp = replace(ReplicaParams(), decode_s=0.018, decode_s_per_seq=0.002, ram_s=0.0)
    alone = Engine(requests((0.0, 8, 11, 0)), rp, ONE).run()
    assert alone.finish_time[0] - alone.first_token[0] == pytest.approx(10 * 0.020)
    five = requests(*((0.0, 8, 11, 0) for _ in range(5)))
    busy = Engine(five, rp, ONE).run()
    assert busy.finish_time[0] - busy.first_token[0] == pytest.approx(10 * 0.028)


def test_mean_ttft_splits_at_vllms_door():
    reqs = [cal.Replayed(0.0, "a", 8, 2, "gpu", 0.080), cal.Replayed(1.0, "a", 8, 2, "disk", 0.100)]
    # predicted TTFTs 60 ms (gpu) and 1.07 - 1.0 = 70 ms (disk: handed to vLLM after 10 ms of
    # load), vLLM's first tokens 30 ms before the client's
    first, engine_in, engine_first = [0.060, 1.070], [0.0, 1.010], [0.030, 1.040]
    rows = cal.inside_outside(reqs, first, engine_in, engine_first, engine_mean_s=0.040)
    inside, outside = rows
    assert (inside.measured, inside.predicted) == pytest.approx((40.0, 30.0))
    assert (outside.measured, outside.predicted) == pytest.approx((50.0, 35.0))


def test_a_cpu_prefill_step_pays_a_fixed_cost_before_its_tokens():
    rp = replace(ReplicaParams(), prefill_step_s=0.012, prefill_tps=10_000.0, ram_s=0.0)
    rp = replace(rp, decode_s=0.005)
    eng = Engine(requests((0.0, 100, 1, 0)), rp, ONE).run()
    assert eng.first_token[0] == pytest.approx(0.012 + 100 / 10_000)  # not max(5 ms, 10 ms)
