"""The GPU-slot / RAM-cache estimate replayed on scripted request orders."""

from __future__ import annotations

import pytest

from lorafleet_core.planning.cache_policy import SlotTracker
from lorafleet_core.wire.tiers import Tier


def test_registration_is_ram_and_first_use_takes_a_gpu_slot():
    t = SlotTracker(gpu_slots=2, cpu_slots=4)
    t.register("a")
    assert t.tier("a") is Tier.RAM
    t.use("a")
    assert t.tier("a") is Tier.GPU
    assert t.tier("b") is None


def test_gpu_slots_are_lru_over_recent_requests():
    t = SlotTracker(gpu_slots=2, cpu_slots=4)
    for a in "abc":
        t.register(a)
    # Scripted order: a, b, a, c -> c evicts b (least recently activated), a stays.
    for a in "abac":
        t.use(a)
    assert t.gpu() == ["a", "c"]
    assert t.tier("b") is Tier.RAM
    assert t.ram_only() == ["b"]
    t.use("b")  # b evicts a now (a was used before c)
    assert t.gpu() == ["c", "b"]
    assert t.tier("a") is Tier.RAM


def test_cpu_cache_overflow_is_what_vllm_would_evict_and_frees_the_gpu_slot():
    t = SlotTracker(gpu_slots=2, cpu_slots=3)
    for a in "abc":
        t.register(a)
    t.use("a")
    t.use("b")
    t.use("a")  # LRU over registered: c, b, a
    evicted = t.register("d")
    assert evicted == ["c"]
    evicted = t.register("e")
    assert evicted == ["b"]
    assert "b" not in t.gpu()
    assert t.registered() == ["a", "d", "e"]


def test_unregister_removes_from_both_tiers_and_use_requires_registration():
    t = SlotTracker(gpu_slots=1, cpu_slots=2)
    t.register("a")
    t.use("a")
    t.unregister("a")
    assert t.tier("a") is None
    assert t.gpu() == []
    with pytest.raises(KeyError):
        t.use("a")
