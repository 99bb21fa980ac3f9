"""Disk tier bookkeeping (pure LRU by bytes) and the atomic publish of verified folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet_agent.disk_cache import DiskCache, LruBytes
from lorafleet_core.storage.adapter_files import ADAPTER_FILES


def test_victims_are_lru_first_and_skip_pinned():
    lru = LruBytes(budget=100)
    lru.put("a", 40)
    lru.put("b", 30)
    lru.put("c", 20)
    lru.touch("a")  # order now b, c, a
    assert lru.used == 90
    assert lru.victims(10) == []
    assert lru.victims(30) == ["b"]
    assert lru.victims(30, pinned={"b"}) == ["c"]
    assert lru.victims(60, pinned={"b"}) == ["c", "a"]
    assert lru.victims(101) is None
    assert lru.victims(80, pinned={"a"}) is None


def _write_adapter(folder: Path, size: int = 10) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ADAPTER_FILES:
        (folder / name).write_bytes(b"x" * size)


def test_commit_is_atomic_and_a_restart_adopts_only_complete_folders(tmp_path):
    cache = DiskCache(tmp_path / "cache", budget=1000)
    staging = cache.staging()
    _write_adapter(staging)
    assert not cache.has("a1")
    cache.commit(staging, "a1")
    assert cache.has("a1")
    assert not staging.exists()
    # A crash mid-download leaves a staging folder and maybe a half folder: neither survives.
    half = cache.staging()
    (half / ADAPTER_FILES[0]).write_text("{}")
    (tmp_path / "cache" / "broken").mkdir()
    restarted = DiskCache(tmp_path / "cache", budget=1000)
    assert restarted.has("a1")
    assert not restarted.has("broken")
    assert not (tmp_path / "cache" / "broken").exists()
    assert list((tmp_path / "cache" / ".incoming").iterdir()) == []
    assert restarted.lru.used == 2 * 10
    restarted.evict("a1")
    assert not (tmp_path / "cache" / "a1").exists()


def test_evict_refuses_a_name_that_is_not_an_adapter_id(tmp_path):
    """`..` and `.` would name the cache's parent and the cache itself: never deleted."""
    root = tmp_path / "cache"
    root.mkdir()
    (tmp_path / "keep").write_text("beside the cache")
    (root / "held").mkdir()
    stranger = root / "Not-An-Id"  # complete, but no adapter is named so: left alone
    stranger.mkdir()
    for name in ADAPTER_FILES:
        (stranger / name).write_bytes(b"x")
    cache = DiskCache(root, 1 << 20)
    assert "Not-An-Id" not in cache.lru.order()
    for name in ("..", ".", ".incoming", "../keep", "a/b", ""):
        with pytest.raises(ValueError, match="not an adapter id"):
            cache.evict(name)
    assert (tmp_path / "keep").is_file()
    assert (root / ".incoming").is_dir()
    assert (stranger / ADAPTER_FILES[0]).is_file()
