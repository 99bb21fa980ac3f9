"""The replica cache policy the agent and the simulator share: tiers, LRU, reference counts."""

from __future__ import annotations

from lorafleet_core.planning.cache_policy import CachePolicy, LruBytes, SlotTracker
from lorafleet_core.wire.tiers import Tier


def policy(gpu: int = 1, cpu: int = 2, disk_bytes: int = 300) -> CachePolicy:
    return CachePolicy(SlotTracker(gpu, cpu), LruBytes(disk_bytes))


def test_tier_walks_gpu_ram_disk_remote():
    p = policy()
    p.disk.put("a", 100)
    assert p.tier("a") is Tier.DISK
    assert p.tier("b") is Tier.REMOTE
    p.slots.register("a")
    assert p.tier("a") is Tier.RAM
    p.use("a")
    assert p.tier("a") is Tier.GPU


def test_use_reports_the_adapter_whose_gpu_slot_it_took():
    p = policy(gpu=1, cpu=2)
    for a in "ab":
        p.slots.register(a)
    assert p.use("a") is None
    assert p.use("b") == "a"
    assert p.tier("a") is Tier.RAM


def test_ram_victim_is_least_recently_used_idle_adapter():
    p = policy(cpu=2)
    for a in "ab":
        p.slots.register(a)
    p.acquire("a")
    assert p.needs_ram_room()
    assert p.ram_victim("c") == "b"  # a is older but has a running request


def test_ram_victim_none_means_wait_when_every_slot_is_in_use():
    p = policy(cpu=2)
    for a in "ab":
        p.slots.register(a)
        p.acquire(a)
    assert p.ram_victim("c") is None
    assert p.release("b") is True
    assert p.ram_victim("c") == "b"


def test_release_counts_references_down_to_idle():
    p = policy()
    p.acquire("a")
    p.acquire("a")
    assert p.release("a") is False
    assert p.release("a") is True
    assert "a" not in p.refs


def test_disk_victims_skip_registered_loading_and_referenced():
    p = policy(cpu=4, disk_bytes=400)
    for a in "wxyz":
        p.disk.put(a, 100)
    p.slots.register("w")
    p.loading.add("x")
    p.acquire("y")
    assert p.disk_victims(100) == ["z"]
    assert p.disk_victims(200) is None
    assert p.disk.used == 400


def test_gpu_set_follows_membership_changes():
    p = policy(gpu=1, cpu=2)
    p.slots.register("a")
    p.slots.register("b")
    assert p.slots.gpu_set() == frozenset()
    p.use("a")
    assert p.slots.gpu_set() == {"a"}
    p.use("b")
    assert p.slots.gpu_set() == {"b"}
    p.slots.unregister("b")
    assert p.slots.gpu_set() == frozenset()
