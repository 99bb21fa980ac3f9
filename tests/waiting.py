"""The one way tests wait: poll a condition until it holds, never sleep a guessed time.

`eventually(check)` calls `check` until it returns something truthy and returns that value;
after `within_s` it fails with the last value (or exception) it saw, so a timeout says what
was wrong. Exceptions listed in `ignore` count as "not yet" (a server still starting refuses
connections). `abort` is asked on every poll for a reason to stop at once (a process that
exited will never become ready). `eventually_async` is the same for async tests: it awaits
between polls, so the event loop under test keeps running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

Abort = Callable[[], str | None]


class _Poll:
    """Shared bookkeeping of one wait (deadline, last value, the failure message)."""

    def __init__(
        self, within_s: float, what: str, ignore: tuple[type[BaseException], ...], abort: Abort
    ) -> None:
        self.deadline = time.monotonic() + within_s
        self.within_s = within_s
        self.what = what
        self.ignore = ignore
        self.abort = abort
        self.last: object = None

    def check_abort(self) -> None:
        reason = self.abort()
        if reason:
            raise AssertionError(f"gave up waiting for {self.what}: {reason}")

    def timed_out(self) -> bool:
        return time.monotonic() >= self.deadline

    def fail(self) -> AssertionError:
        return AssertionError(
            f"timed out after {self.within_s:g}s waiting for {self.what} (last: {self.last!r})"
        )


def _never() -> str | None:
    return None


def eventually(
    check: Callable[[], T],
    *,
    within_s: float = 10.0,
    interval_s: float = 0.05,
    what: str = "the condition",
    ignore: tuple[type[BaseException], ...] = (),
    abort: Abort = _never,
) -> T:
    """`check()`'s first truthy value, polling every `interval_s` for at most `within_s`."""
    poll = _Poll(within_s, what, ignore, abort)
    while True:
        try:
            value = check()
            if value:
                return value
            poll.last = value
        except ignore as exc:
            poll.last = exc
        poll.check_abort()
        if poll.timed_out():
            raise poll.fail()
        time.sleep(interval_s)


async def eventually_async(
    check: Callable[[], T | Awaitable[T]],
    *,
    within_s: float = 10.0,
    interval_s: float = 0.02,
    what: str = "the condition",
    ignore: tuple[type[BaseException], ...] = (),
    abort: Abort = _never,
) -> T:
    """`eventually` for async tests: `check` may be a plain or an async function."""
    poll = _Poll(within_s, what, ignore, abort)
    while True:
        try:
            result = check()
            value: T = await result if isinstance(result, Awaitable) else result
            if value:
                return value
            poll.last = value
        except ignore as exc:
            poll.last = exc
        poll.check_abort()
        if poll.timed_out():
            raise poll.fail()
        await asyncio.sleep(interval_s)
