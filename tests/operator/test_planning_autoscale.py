from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lorafleet_core.api.models import AutoscalingSpec, ReplicaBounds
from lorafleet_core.planning.autoscale import Load, ScaleState, recommend, stabilize
from lorafleet_core.wire.replica_state import ReplicaState

SPEC = AutoscalingSpec(target_tokens_in_flight=1000, target_queue_depth=4)
BOUNDS = ReplicaBounds(min=2, max=10)


def test_recommend_takes_the_tighter_signal_within_bounds():
    assert recommend(Load(0, 0), SPEC, BOUNDS) == 2
    assert recommend(Load(4500, 0), SPEC, BOUNDS) == 5
    assert recommend(Load(100, 23), SPEC, BOUNDS) == 6
    assert recommend(Load(10**6, 0), SPEC, BOUNDS) == 10


def test_load_sums_replica_states():
    states = [ReplicaState(replica_id="a", tokens_in_flight=10, queue_depth=1)] * 3
    assert Load.of(states) == Load(30, 3, 3)


def test_short_spike_does_not_scale_up_but_sustained_load_does():
    d = stabilize(ScaleState(), 2, 2, 0.0, 30, 300)
    d = stabilize(d.state, 2, 8, 10.0, 30, 300)  # spike: the 2 at t=0 is still in the window
    assert d.desired == 2
    assert d.reason == "Stabilizing"
    d = stabilize(d.state, 2, 2, 20.0, 30, 300)  # gone again
    d = stabilize(d.state, 2, 8, 40.0, 30, 300)  # the 2 at t=20 is still in the window
    assert d.desired == 2
    d = stabilize(d.state, 2, 8, 55.0, 30, 300)  # 8 for the whole window (t=25..55)
    assert d.desired == 8
    assert d.reason == "ScaleUp"


def test_short_lull_does_not_scale_down():
    s = ScaleState()
    d = stabilize(s, 8, 8, 0.0, 30, 300)
    d = stabilize(d.state, 8, 2, 100.0, 30, 300)
    assert d.desired == 8
    d = stabilize(d.state, 8, 2, 301.0, 30, 300)
    assert d.desired == 2
    assert d.reason == "ScaleDown"


@settings(max_examples=50, deadline=None)
@given(raws=st.lists(st.integers(1, 10), min_size=5, max_size=120))
def test_no_flapping_within_the_scale_down_window(raws):
    up, down = 30.0, 120.0
    state, current = ScaleState(), 1
    last_up: float | None = None
    for i, raw in enumerate(raws):
        now = i * 5.0
        d = stabilize(state, current, raw, now, up, down)
        if d.desired > current:
            last_up = now
        if d.desired < current and last_up is not None:
            assert now - last_up > down, "scaled down within the window after scaling up"
        state, current = d.state, d.desired


def test_default_target_sizes_the_designs_peak_near_the_slo_count_not_at_max():
    # 40 requests/s, each ~12 s in flight, of the trace's 1,155 + 211 tokens: ~480 requests.
    spec = AutoscalingSpec()
    assert spec.target_tokens_in_flight == 16_384
    peak = Load(tokens_in_flight=480 * (1155 + 211), queue_depth=0, replicas_reporting=26)
    assert recommend(peak, spec, ReplicaBounds(min=2, max=64)) == 41  # the capacity search: 40
    # a target of three such requests asks for 161 replicas: every pool goes straight to its max
    small = AutoscalingSpec(target_tokens_in_flight=4096)
    assert recommend(peak, small, ReplicaBounds(min=2, max=64)) == 64
