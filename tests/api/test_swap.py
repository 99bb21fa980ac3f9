"""Compare-and-swap writes (lorafleet_core.storage.swap) and the folder's inter-process lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lorafleet_core.storage.manifests import LOCK_FILE, folder_lock, load_folder
from lorafleet_core.storage.swap import (
    SWAP_TRIES,
    WriteConflict,
    precondition_patch,
    retry_swaps,
    swap_in_folder,
)


def _alias(adapter: str) -> dict[str, Any]:
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "AdapterAlias",
        "metadata": {"name": "acme-x-prod"},
        "spec": {"model": "acme/x:prod", "tenant": "acme", "adapter": adapter},
    }


def _served(folder: Path) -> str:
    (alias,) = load_folder(folder).of_kind("AdapterAlias")
    return str(alias.body["spec"]["adapter"])


def test_a_folder_swap_writes_only_over_the_version_read(tmp_path: Path):
    swap_in_folder(tmp_path, _alias("v1"), None)
    with pytest.raises(WriteConflict, match="created meanwhile"):
        swap_in_folder(tmp_path, _alias("v9"), None)  # a create that lost the race
    read = _alias("v1") | {"status": {"adapter": "v1"}}  # a reader adds the reconciler's status
    swap_in_folder(tmp_path, _alias("v2"), read)
    assert _served(tmp_path) == "v2"
    with pytest.raises(WriteConflict, match="changed meanwhile"):
        swap_in_folder(tmp_path, _alias("v3"), read)  # v1 as read is gone: v2 is not lost
    assert _served(tmp_path) == "v2"
    (tmp_path / "adapteralias-acme-x-prod.yaml").unlink()
    with pytest.raises(WriteConflict):
        swap_in_folder(tmp_path, _alias("v3"), _alias("v2"))  # deleted since read


_TRY_LOCK = """
import fcntl, sys
with open(sys.argv[1], "a+b") as f:
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(3)
"""


def test_the_folder_lock_keeps_another_process_out_until_released(tmp_path: Path):
    def other_process_gets_it() -> bool:
        lock = str(tmp_path / LOCK_FILE)
        code = subprocess.run([sys.executable, "-c", _TRY_LOCK, lock], check=False).returncode
        assert code in (0, 3)
        return code == 0

    with folder_lock(tmp_path):
        assert not other_process_gets_it()
    assert other_process_gets_it()
    assert load_folder(tmp_path).objects == []  # the lock file is no manifest


def test_retries_read_again_after_each_conflict_and_give_up_bounded():
    calls: list[int] = []

    def lands_third() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise WriteConflict("another writer got there first")
        return "done"

    assert retry_swaps(lands_third) == "done"
    assert len(calls) == 3
    calls.clear()

    def never() -> str:
        calls.append(1)
        raise WriteConflict("always")

    with pytest.raises(WriteConflict):
        retry_swaps(never)
    assert len(calls) == SWAP_TRIES


def test_a_cluster_swap_patches_the_spec_with_the_version_read_as_precondition():
    read = _alias("v1")
    read["metadata"] |= {"resourceVersion": "42", "uid": "u"}
    assert precondition_patch(_alias("v2"), read) == {
        "metadata": {"resourceVersion": "42"},
        "spec": {"model": "acme/x:prod", "tenant": "acme", "adapter": "v2"},
    }
    with pytest.raises(ValueError, match="no resourceVersion"):
        precondition_patch(_alias("v2"), _alias("v1"))
