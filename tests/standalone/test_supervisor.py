"""Supervisor with real child processes: readiness, restart-or-report, no orphans."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from lorafleet_standalone.supervisor import (
    ProcessSpec,
    StartError,
    Supervisor,
    group_members,
)
from tests.waiting import eventually


def _alive(pid: int) -> bool:
    try:
        # A zombie (exited, not yet reaped by its parent) counts as gone.
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _family_script(pid_file: Path) -> list[str]:
    """A child that starts a grandchild and ignores SIGTERM in neither (a normal server)."""
    code = textwrap.dedent(
        f"""
        import subprocess, sys, time, pathlib
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        pathlib.Path({str(pid_file)!r}).write_text(str(g.pid))
        time.sleep(600)
        """
    )
    return [sys.executable, "-c", code]


def test_stop_all_kills_children_and_grandchildren(tmp_path):
    sup = Supervisor(stop_timeout_s=5, say=lambda _m: None)
    pid_files = [tmp_path / f"g{i}" for i in range(2)]
    children = [
        sup.start(
            ProcessSpec(name=f"c{i}", argv=_family_script(p), log_file=tmp_path / f"c{i}.log")
        )
        for i, p in enumerate(pid_files)
    ]
    eventually(lambda: all(p.exists() and p.read_text() for p in pid_files), within_s=15)
    pids = [c.proc.pid for c in children] + [int(p.read_text()) for p in pid_files]
    assert all(_alive(p) for p in pids)
    sup.stop_all()
    eventually(lambda: not any(_alive(p) for p in pids), within_s=15)
    assert all(group_members(c.proc.pid) == [] for c in children)


def test_term_ignoring_child_is_killed(tmp_path):
    ready = tmp_path / "ignoring"
    code = (
        "import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(ready)!r}).write_text('1'); time.sleep(600)"
    )
    sup = Supervisor(stop_timeout_s=1, say=lambda _m: None)
    child = sup.start(ProcessSpec(name="stubborn", argv=[sys.executable, "-c", code]))
    eventually(ready.exists, within_s=15, what="the child to ignore SIGTERM")
    start = time.monotonic()
    sup.stop_all()
    assert not _alive(child.proc.pid)
    assert time.monotonic() - start < 10


def test_exited_child_is_restarted_then_reported(tmp_path):
    counter = tmp_path / "runs"
    code = (
        f"import pathlib; p = pathlib.Path({str(counter)!r}); "
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); raise SystemExit(3)"
    )
    log = tmp_path / "crash.log"
    sup = Supervisor(max_restarts=2, stop_timeout_s=1, restart_backoff_s=0.1, say=lambda _m: None)
    child = sup.start(ProcessSpec(name="crashy", argv=[sys.executable, "-c", code], log_file=log))
    events: list[str] = []

    def gave_up() -> bool:
        events.extend(sup.check())
        return child.failed is not None

    eventually(gave_up, within_s=30)
    assert counter.read_text() == "xxx"  # first run + 2 restarts
    assert any("restart #1" in e for e in events)
    assert any("crashy exited with code 3; gave up after 2 restarts" in e for e in events)
    sup.stop_all()


def test_wait_ready_reports_a_child_that_dies_with_its_log(tmp_path):
    log = tmp_path / "bad.log"
    sup = Supervisor(say=lambda _m: None)
    code = "import sys; print('port already in use', flush=True); sys.exit(7)"
    child = sup.start(
        ProcessSpec(
            name="bad",
            argv=[sys.executable, "-c", code],
            log_file=log,
            health_url="http://127.0.0.1:9/never",
        )
    )
    with pytest.raises(StartError, match=r"(?s)bad exited with code 7.*port already in use"):
        sup.wait_ready(child)
    sup.stop_all()


def test_wait_ready_says_what_it_waits_for_while_a_child_starts(tmp_path: Path) -> None:
    said: list[str] = []
    sup = Supervisor(say=said.append, progress_s=0.5)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    child = sup.start(
        ProcessSpec(
            name="slow",
            argv=sleeper,
            log_file=tmp_path / "slow.log",
            health_url="http://127.0.0.1:9/never",
            start_timeout_s=2.0,
        )
    )
    with pytest.raises(StartError, match="slow not ready after 2 s"):
        sup.wait_ready(child)
    sup.stop_all()
    assert said, "nothing said while waiting"
    assert said[0].startswith("slow still starting (")
    assert f"gives up after 2 s; log {tmp_path / 'slow.log'}" in said[0]


def test_children_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    """SIGKILL on `lorafleet up` (no chance to clean up) still leaves no server running."""
    pid_file = tmp_path / "child.pid"
    code = textwrap.dedent(
        f"""
        import pathlib, sys, time
        from lorafleet_standalone.supervisor import ProcessSpec, Supervisor
        sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
        child = Supervisor().start(ProcessSpec(name="c", argv=sleeper))
        pathlib.Path({str(pid_file)!r}).write_text(str(child.proc.pid))
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        eventually(lambda: pid_file.exists() and bool(pid_file.read_text()), within_s=15)
        child = int(pid_file.read_text())
        assert _alive(child)
        parent.kill()
        parent.wait(10)
        eventually(lambda: not _alive(child), within_s=15)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_child_that_ran_stably_gets_its_restart_budget_back(tmp_path):
    """Crashes far apart are restarted every time; only a crash loop gives up."""
    counter = tmp_path / "runs"
    code = (
        f"import pathlib; p = pathlib.Path({str(counter)!r}); "
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); raise SystemExit(3)"
    )
    # stable_s=0: every run counts as stable, so a budget of 1 restart never runs out.
    sup = Supervisor(
        max_restarts=1, stop_timeout_s=1, restart_backoff_s=0.05, say=lambda _m: None, stable_s=0
    )
    child = sup.start(ProcessSpec(name="rare", argv=[sys.executable, "-c", code]))
    eventually(lambda: (sup.check(), len(counter.read_text()) >= 5)[1], within_s=30,
               ignore=(FileNotFoundError,))  # fmt: skip
    assert child.failed is None
    assert child.restarts == 1
    sup.stop_all()


def test_an_essential_child_that_gave_up_is_reported_as_such(tmp_path):
    sup = Supervisor(max_restarts=0, stop_timeout_s=1, say=lambda _m: None)
    crash = [sys.executable, "-c", "raise SystemExit(4)"]
    side = sup.start(ProcessSpec(name="side", argv=crash))
    eventually(lambda: (sup.check(), side.failed)[1], within_s=30)
    assert sup.essential_failure() is None  # a replica failing leaves the rest serving
    gateway = sup.start(ProcessSpec(name="gateway", argv=crash, essential=True))
    eventually(lambda: (sup.check(), gateway.failed)[1], within_s=30)
    assert sup.essential_failure() is gateway
    sup.stop_all()


def test_a_child_and_the_processes_it_starts_run_on_the_cores_it_was_given(tmp_path):
    core = min(os.sched_getaffinity(0))
    pid_file = tmp_path / "g"
    sup = Supervisor(stop_timeout_s=5, say=lambda _m: None)
    try:
        child = sup.start(
            ProcessSpec(name="c", argv=_family_script(pid_file), cpus=frozenset({core}))
        )
        other = sup.start(ProcessSpec(name="o", argv=_family_script(tmp_path / "o")))
        eventually(lambda: pid_file.exists() and pid_file.read_text(), within_s=15)
        grandchild = int(pid_file.read_text())
        assert os.sched_getaffinity(child.proc.pid) == {core}
        assert os.sched_getaffinity(grandchild) == {core}
        assert os.sched_getaffinity(other.proc.pid) == os.sched_getaffinity(0)
    finally:
        sup.stop_all()
