"""The calibration's CPU layouts (benchmarks/calibration_layout.py)."""

from __future__ import annotations

import os
import threading

import pytest

from benchmarks.calibration_layout import apply_layout, split_cpus


def test_the_engine_gets_the_lowest_core_and_the_path_the_rest():
    assert split_cpus({0, 1}) == ({0}, {1})
    assert split_cpus({2, 3, 5}) == ({2}, {3, 5})
    with pytest.raises(ValueError, match="at least 2 cores"):
        split_cpus({0})


def test_the_shared_layout_changes_no_cpu_mask():
    before = os.sched_getaffinity(0)
    assert apply_layout("shared", {"client": [os.getpid()]}) == {"layout": "shared"}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ValueError, match="layout must be one of"):
        apply_layout("spread", {})


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the pinned layout needs 2 cores")
def test_the_pinned_layout_sets_every_thread_of_each_process_and_later_threads_inherit():
    before = os.sched_getaffinity(0)
    ready, release = threading.Event(), threading.Event()
    seen: list[set[int]] = []

    def worker() -> None:
        ready.set()
        release.wait(10)
        seen.append(os.sched_getaffinity(0))

    t = threading.Thread(target=worker)
    t.start()
    ready.wait(10)
    try:
        got = apply_layout("pinned", {"client": [os.getpid()]})
        release.set()
        t.join(10)
        later: list[set[int]] = []
        t2 = threading.Thread(target=lambda: later.append(os.sched_getaffinity(0)))
        t2.start()
        t2.join(10)
        assert got["layout"] == "pinned"
        assert set(got["path_cpus"]) == os.sched_getaffinity(0)  # the test process: the path
        assert seen == [set(got["path_cpus"])]  # a thread that already ran
        assert later == [set(got["path_cpus"])]  # a thread started afterwards
        assert not set(got["engine_cpus"]) & set(got["path_cpus"])
    finally:
        release.set()
        os.sched_setaffinity(0, before)
        for tid in os.listdir(f"/proc/{os.getpid()}/task"):
            try:
                os.sched_setaffinity(int(tid), before)
            except OSError:
                continue
