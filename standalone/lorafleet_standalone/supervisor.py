"""Starting, watching and stopping local processes, each in its own process group.

Every child is started with `start_new_session=True`: it leads a new process group (and session),
so (1) a Ctrl-C at the terminal reaches only `lorafleet up`, which then stops children in
reverse start order (gateway before agents before vLLM: no request is cut mid-flight by an
engine dying under its agent), and (2) stopping a child signals its whole group, including
grandchildren such as vLLM's engine-core process. On Linux each child also gets
PR_SET_PDEATHSIG=SIGTERM, so even a SIGKILLed `lorafleet up` leaves no server running.

A child that exits on its own is restarted (with backoff) up to `max_restarts` times, then
reported as failed; the rest keep running.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ProcessSpec:
    """How to run one child: argv, extra env, log file, and how to tell it is ready."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    log_file: Path | None = None
    health_url: str | None = None  # ready when GET returns 200
    start_timeout_s: float = 180.0
    cwd: Path | None = None
    # Nothing is served without it (the gateway): once it failed for good, `up` stops.
    essential: bool = False
    # The cores the child (and every process it starts) may run on; None: this process's.
    cpus: frozenset[int] | None = None


@dataclass
class Child:
    spec: ProcessSpec
    proc: subprocess.Popen[bytes]
    restarts: int = 0
    started_at: float = field(default_factory=time.monotonic)
    failed: str | None = None
    ready: bool = False


class StartError(RuntimeError):
    pass


def _prepare_child(cpus: frozenset[int] | None) -> None:  # in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if cpus:
            os.sched_setaffinity(0, cpus)  # before exec: every process it starts inherits it


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group (psutil lists them; POSIX groups)."""
    out = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.getpgid(proc.pid) == pgid:
                out.append(proc.pid)
        except OSError:  # exited since it was listed
            continue
    return out


def _group_alive(pgid: int) -> bool:
    # Not kill(pgid, 0): zombies whose parent never reaps them would look alive forever.
    return bool(group_members(pgid))


class Supervisor:
    def __init__(
        self,
        *,
        max_restarts: int = 3,
        stop_timeout_s: float = 20.0,
        restart_backoff_s: float = 1.0,
        say: Callable[[str], None] = print,
        stable_s: float = 300.0,
        progress_s: float = 15.0,
    ) -> None:
        self.children: list[Child] = []
        # wait_ready says what it waits for this often: a CPU vLLM takes a minute or more to
        # start, and a console silent that long looks hung to whoever ran `lorafleet up`.
        self.progress_s = progress_s
        self.max_restarts = max_restarts
        # A child that ran this long since its last start was healthy: its restart budget is
        # whole again, so three crashes a week apart do not add up to "gave up".
        self.stable_s = stable_s
        self.stop_timeout_s = stop_timeout_s
        self.restart_backoff_s = restart_backoff_s  # doubles with each restart, at most 10 s
        self.say = say

    def _spawn(self, spec: ProcessSpec) -> subprocess.Popen[bytes]:
        out: int | object = subprocess.DEVNULL
        log = None
        if spec.log_file is not None:
            spec.log_file.parent.mkdir(parents=True, exist_ok=True)
            log = spec.log_file.open("ab")
            out = log
        try:
            return subprocess.Popen(
                list(spec.argv),
                env={**os.environ, **spec.env},
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,  # type: ignore[arg-type]
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=functools.partial(_prepare_child, spec.cpus),
            )
        finally:
            if log is not None:
                log.close()  # the child holds its own descriptor

    def start(self, spec: ProcessSpec) -> Child:
        child = Child(spec, self._spawn(spec))
        self.children.append(child)
        return child

    def wait_ready(self, child: Child, stop: Callable[[], bool] = lambda: False) -> None:
        """Block until the child's health URL answers 200; StartError if it dies or times out."""
        spec = child.spec
        began = time.monotonic()
        deadline = began + spec.start_timeout_s
        next_note = began + self.progress_s
        while True:
            code = child.proc.poll()
            if code is not None:
                raise StartError(f"{spec.name} exited with code {code} while starting{_tail(spec)}")
            if spec.health_url is None or _healthy(spec.health_url):
                child.ready = True
                return
            if stop():
                raise StartError(f"{spec.name}: interrupted while starting")
            if time.monotonic() > deadline:
                raise StartError(
                    f"{spec.name} not ready after {spec.start_timeout_s:.0f} s{_tail(spec)}"
                )
            if time.monotonic() >= next_note:
                log = f"; log {spec.log_file}" if spec.log_file is not None else ""
                self.say(
                    f"{spec.name} still starting ({time.monotonic() - began:.0f} s, "
                    f"gives up after {spec.start_timeout_s:.0f} s{log})"
                )
                next_note += self.progress_s
            time.sleep(0.5)

    def check(self) -> list[str]:
        """Restart children that exited; returns messages about what happened."""
        events = []
        for child in self.children:
            if child.failed is not None:
                continue
            code = child.proc.poll()
            if code is None:
                continue
            # Leftover grandchildren would hold the ports a restart needs.
            self._kill_group(child)
            if time.monotonic() - child.started_at >= self.stable_s:
                child.restarts = 0
            if child.restarts >= self.max_restarts:
                child.failed = f"exited with code {code}; gave up after {child.restarts} restarts"
                events.append(f"{child.spec.name} {child.failed}{_tail(child.spec)}")
                continue
            child.restarts += 1
            time.sleep(min(self.restart_backoff_s * 2.0 ** (child.restarts - 1), 10.0))
            events.append(f"{child.spec.name} exited with code {code}; restart #{child.restarts}")
            child.proc = self._spawn(child.spec)
            child.started_at = time.monotonic()
        return events

    def _kill_group(self, child: Child) -> None:
        pgid = child.proc.pid  # leader of its own session: pgid == pid
        deadline = time.monotonic() + self.stop_timeout_s
        if _signal_group(pgid, signal.SIGTERM):
            while time.monotonic() < deadline and _group_alive(pgid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(timeout=0.2)
            if _group_alive(pgid):
                _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)

    def stop_all(self) -> None:
        """Stop every child, newest first, each with its whole process group."""
        for child in reversed(self.children):
            if child.proc.poll() is None:
                self.say(f"stopping {child.spec.name} (pid {child.proc.pid})")
            self._kill_group(child)

    def stop(self, children: list[Child]) -> None:
        """Stop these children (newest first, whole groups) and supervise them no more."""
        for child in reversed(children):
            if child in self.children:
                self.children.remove(child)
            if child.proc.poll() is None:
                self.say(f"stopping {child.spec.name} (pid {child.proc.pid})")
            self._kill_group(child)

    def essential_failure(self) -> Child | None:
        """A child nothing works without that failed for good, if any."""
        return next((c for c in self.children if c.spec.essential and c.failed), None)

    def pids(self) -> dict[str, int]:
        return {c.spec.name: c.proc.pid for c in self.children}


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(spec: ProcessSpec, lines: int = 15) -> str:
    if spec.log_file is None or not spec.log_file.is_file():
        return ""
    text = spec.log_file.read_text(errors="replace").splitlines()[-lines:]
    return f"; last lines of {spec.log_file}:\n    " + "\n    ".join(text)
