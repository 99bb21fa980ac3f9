"""The adapter cache's volume full or read-only during a pull, against a real agent in front of
the session's real vLLM, adapters from moto's S3.

The cache is a small tmpfs of its own (mounted here: the agent and tests run as root on the
build machines, as CI does), so the kernel itself refuses the write: ENOSPC in the middle of
the 143 KB safetensors file, EROFS when the volume is remounted read-only. The agent must
answer 503 `cache_full` (the gateway then tries another replica), serve nothing half-written,
not hold the adapter as refused, and load it (checksum verified) once the disk has room.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.agent.conftest import load, metric, state
from tests.conftest import DATA_HEADERS, unique_id

pytestmark = pytest.mark.vllm


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


def _entries(cache: Path) -> list[str]:
    """Everything in the cache folder, staging area included."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))


def test_a_full_or_read_only_cache_volume_is_a_clear_503_and_nothing_half_written_serves(
    run_agent, make_record, vllm_server, tmp_path
):
    full = make_record("zebra", unique_id("disk-full"))
    ro = make_record("otter", unique_id("disk-ro"))
    with tmpfs(tmp_path / "cache", "64k") as cache, run_agent(cache_dir=cache) as agent:
        refused = load(agent, full)
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "cache_full"
        assert "No space left on device" in error["message"]
        assert _entries(cache) == [".incoming"]  # the partial download went with its folder
        assert full.id not in vllm_server.lora_names()
        assert full.id not in state(agent)["failed_adapters"]  # the files are not at fault
        assert metric(agent, "lorafleet_agent_disk_write_failures_total") == 1
        # A request for it is refused the same way: the gateway tries another replica.
        answer = httpx.post(
            f"{agent.data_url}/v1/completions",
            json={"model": full.id, "prompt": "hi", "max_tokens": 1},
            headers=DATA_HEADERS,
            timeout=60,
        )
        assert (answer.status_code, answer.json()["error"]["code"]) == (503, "cache_full")

        remount(cache, "size=4m")  # room again: the next load pulls and verifies it
        loaded = load(agent, full)
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["from"] == "remote"
        assert full.id in vllm_server.lora_names()

        remount(cache, "ro")
        refused = load(agent, ro)
        assert refused.status_code == 503, refused.text
        assert "Read-only file system" in refused.json()["error"]["message"]
        assert ro.id not in vllm_server.lora_names()
        assert load(agent, full).status_code == 200  # what is on disk already keeps serving
