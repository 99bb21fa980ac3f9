"""The pure parts of the host-CPU and stall probes: what their measurements turn into."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.calibration_host_probe import fit
from benchmarks.calibration_stall_fit import (
    busy_fit,
    held_gaps,
    load_fit,
    sentinel_fit,
    stop_fit,
    stops,
)


def group(mt: int, k: int, tokens: float, path: float, first: float | None) -> dict[str, Any]:
    share = {"gateway": 0.2, "agent": 0.2, "api_server": 0.3, "client": 0.3}
    return {
        "max_tokens": mt,
        "concurrency": k,
        "requests": 10,
        "tokens_per_request": tokens,
        "cpu_per_request_s": {**{r: path * s for r, s in share.items()}, "worker": 0.02},
        "path_cpu_per_request_s": path,
        "vllm": {"request_inference_time_seconds_sum": 0.1},
        "first_token_cpu_s": None if first is None else {r: first * s for r, s in share.items()},
    }


def test_host_fit_reads_per_token_cost_from_the_slope_and_the_rest_from_first_tokens():
    doc = {
        "groups": [
            group(1, 1, 1.0, 0.016, 0.015),
            group(8, 1, 8.0, 0.023, 0.015),
            group(8, 4, 8.0, 0.017, None),  # concurrency 4 is a check, not an input
        ],
        "background_cores": {"gateway": 0.01, "worker": 0.2},
        "affinity": {"gateway": {"1/1": [0, 1]}, "worker": {"2/2": [0]}},
    }
    m = fit(doc)
    assert m["host_token_cpu_s"] == pytest.approx(0.001)  # (23 - 16) ms / 7 tokens
    assert m["host_ttft_cpu_s"] == pytest.approx(0.015)
    assert m["host_end_cpu_s"] == pytest.approx(0.001)  # 16 - 15 ms
    assert m["host_cores"] == 2.0  # the path may run on CPUs 0 and 1
    assert m["host_background"] == pytest.approx(0.21)
    # the worker's 20 ms a request above idle, over 10 ms of engine time a request
    assert m["host_engine_busy"] == pytest.approx(2.0)


def test_a_held_ping_is_one_stop_and_client_collections_are_not_the_hops():
    pings = [("agent", t / 10, 0.002) for t in range(20)]
    pings += [("agent", 2.0, 0.150), ("agent", 2.05, 0.100)]  # one stop, seen twice
    pings += [("agent", 3.0, 0.080)]  # the client was collecting then
    found = stops(pings, client_gc=[(2.99, 2, 0.09)], threshold_s=0.025)
    ((start, length),) = found["agent"]
    assert (start, length) == pytest.approx((2.0, 0.148))
    assert found["client"] == [(2.99, 0.09)]


def test_stop_fit_reads_rate_and_length_from_the_share_of_held_pings():
    # One hop pinged every 10 ms for 100 s; a 200 ms stop every 10 s (2% of the time): a ping
    # inside a stop waits for the rest of it.
    pings = []
    for i in range(10_000):
        t = i * 0.01
        into = t % 10.0
        pings.append(("api_server", t, 0.002 + (0.2 - into if into < 0.2 else 0.0)))
    fit = stop_fit(pings, [(50.5, 2, 0.1)], threshold_s=0.02, duration_s=100.0, requests=500)
    # api_server: 10 stops of ~0.2 s; the client's one 0.1 s collection: 11 stops in 500 requests
    assert fit["hops"]["api_server"]["stop_s"] == pytest.approx(0.2, rel=0.06)
    assert fit["host_pause_per_request"] == pytest.approx(11 / 500, rel=0.06)
    assert fit["host_pause_s"] == pytest.approx((10 * 0.2 + 0.1) / 11, rel=0.06)


def test_load_fit_gives_the_loads_the_stops_beyond_the_quiet_rate():
    quiet = {"requests": 150, "loads": 0, "fit": {"host_pause_per_request": 0.01,
                                                  "host_pause_s": 0.02}}  # fmt: skip
    # 150 requests, 120 of them loads: 1.5 stops expected from the quiet rate, 13.5 seen.
    loaded = {"requests": 150, "loads": 120, "fit": {"host_pause_per_request": 0.09,
                                                     "host_pause_s": 0.058}}  # fmt: skip
    fit = load_fit(quiet, loaded)
    assert fit["host_pause_per_load"] == pytest.approx(12 / 120)
    # stopped 13.5 x 58 ms in all, 1.5 x 20 ms of it the quiet rate's: 0.753 s over 12 stops
    assert fit["host_pause_load_s"] == pytest.approx((13.5 * 0.058 - 1.5 * 0.02) / 12)
    assert load_fit(loaded, quiet) == {"host_pause_per_load": 0.0, "host_pause_load_s": 0.0}


def stream(start: float, gaps: list[float]) -> list[tuple[float, int]]:
    out = [(start, 1)]
    for g in gaps:
        out.append((out[-1][0] + g, 1))
    return out


def test_a_gap_followed_by_a_burst_is_a_hold_and_a_lone_late_token_is_not():
    held = stream(0.0, [0.004] * 10 + [0.054, 0.0005, 0.0005, 0.0005] + [0.004] * 10)
    slow_step = stream(10.0, [0.004] * 10 + [0.054] + [0.004] * 10)
    ((start, length),) = held_gaps([held, slow_step], threshold_s=0.015)
    assert start == pytest.approx(0.040)
    assert length == pytest.approx(0.050)  # the gap beyond the stream's median 4 ms
    fit = sentinel_fit([held, slow_step], 0.015, duration_s=30.0, requests=150)
    streaming = held[-1][0] + slow_step[-1][0] - 10.0
    assert fit["host_pause_per_request"] == pytest.approx(30.0 / streaming / 150)
    assert fit["host_pause_s"] == pytest.approx(0.050)


def test_load_fit_prefers_the_sentinels_holds():
    quiet = {"requests": 100, "loads": 0, "fit": {"host_pause_per_request": 0.0,
             "host_pause_s": 0.0}, "sentinel": {"host_pause_per_request": 0.0,
             "host_pause_s": 0.0}}  # fmt: skip
    loaded = {"requests": 100, "loads": 50, "fit": {"host_pause_per_request": 0.0,
              "host_pause_s": 0.0}, "sentinel": {"host_pause_per_request": 0.2,
              "host_pause_s": 0.04}}  # fmt: skip
    assert load_fit(quiet, loaded) == pytest.approx(
        {"host_pause_per_load": 20 / 50, "host_pause_load_s": 0.04}
    )


def test_load_fit_gives_nothing_to_loads_that_add_stops_but_no_stopped_time():
    quiet = {"requests": 150, "loads": 1, "fit": {"host_pause_per_request": 0.4,
             "host_pause_s": 0.28}}  # fmt: skip
    loaded = {"requests": 150, "loads": 136, "fit": {"host_pause_per_request": 0.5,
              "host_pause_s": 0.2}}  # fmt: skip
    assert load_fit(quiet, loaded) == {"host_pause_per_load": 0.0, "host_pause_load_s": 0.0}


def test_host_fit_leaves_out_an_engine_pinned_off_the_paths_cores():
    # The pinned layout: the path on CPU 1, vLLM's engine on CPU 0 (calibration_layout).
    doc: dict[str, Any] = {
        "groups": [group(1, 1, 1.0, 0.016, 0.015), group(8, 1, 8.0, 0.023, 0.015)],
        "background_cores": {"gateway": 0.01, "worker": 0.2, "engine_core": 0.05},
        "affinity": {
            "gateway": {"1/1": [1]},
            "client": {"3/3": [1]},
            "worker": {"2/2": [0]},
            "engine_core": {"4/4": [0], "4/5": [0]},
        },
    }
    m = fit(doc)
    assert m["host_cores"] == 1.0
    assert m["host_engine_busy"] == 0.0  # its threads cannot run where the path runs
    assert m["host_background"] == pytest.approx(0.01)  # the worker's idle polling left out
    # The same fleet with the EngineCore allowed on both cores competes again.
    doc["affinity"]["engine_core"] = {"4/4": [0, 1]}
    assert fit(doc)["host_background"] == pytest.approx(0.06)


def probe_run(requests: int, duration: float, per_request: float, stop_s: float,
              busy_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    run: dict[str, Any] = {
        "requests": requests,
        "duration_s": duration,
        "aliases": 3,
        "fit": {"host_pause_per_request": per_request, "host_pause_s": stop_s},
    }
    if busy_s is not None:
        run["busy"] = {"requests": 10, "busy_s": busy_s}
    return run


def test_busy_fit_gives_the_stops_beyond_the_plain_rate_per_second_of_engine_busy_time():
    plain = probe_run(150, 30.0, 0.02, 0.02)  # 0.1 stops/s of 20 ms
    # Beside the keep-busy requests (engine stepping 24 of 30 s): 1.1 stops/s of ~200 ms.
    busy = probe_run(150, 30.0, 0.22, (0.1 * 0.02 + 1.0 * 0.218) / 1.1, busy_s=24.0)
    fit = busy_fit(plain, busy)
    assert fit["host_pause_per_busy_s"] == pytest.approx(1.0 / 0.8)  # 1 extra stop/s, 80% busy
    assert fit["host_pause_busy_s"] == pytest.approx(0.218)


def test_busy_fit_is_zero_when_a_busy_engine_adds_no_stopped_time():
    plain = probe_run(150, 30.0, 0.02, 0.05)
    busy = probe_run(150, 30.0, 0.04, 0.02, busy_s=28.0)  # more stops, same stopped time
    assert busy_fit(plain, busy) == {"host_pause_per_busy_s": 0.0, "host_pause_busy_s": 0.0}
    assert busy_fit(plain, plain | {"busy": {"busy_s": 0.0}})["host_pause_per_busy_s"] == 0.0
