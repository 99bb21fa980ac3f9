"""Requests waiting on vLLM, so that a hung engine's can be failed instead of left to wait.

A vLLM that hangs (SIGSTOP, a wedged engine: the kernel still accepts its connections, nothing
answers) holds every request that had reached it. The agent calls it hung after 3 timed-out
health checks (lorafleet_agent.engine_watch) and sends nothing new there; a short stall then
resumes and its requests continue where they stopped, which is what a client wants from a
hiccup. A long one would otherwise hold them for the read timeouts (600 s here, 300 s in the
gateway) of silence. So once the engine has been hung for `ENGINE_HUNG_FAIL_S` (30 s) the
watch fails them (`fail_all`): a request whose answer had not started is answered 503
`engine_unavailable` (the gateway tries another replica: nothing was delivered), a started
one is cut as when vLLM dies (the gateway ends the stream with an in-band error event; a
non-stream answer's connection ends short), and vLLM sees its client leave when it resumes.

Only the awaits on vLLM are registered (`with waits.on_engine():` around one read), so a
request is never failed while it sends to its own client. Each wait that ends with vLLM's
answer counts in `answers`: the watch's sign that a slow `/health` is a busy engine, not a hung
one.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class EngineHung(Exception):
    """This request's wait on vLLM was failed: the engine has been hung too long."""


class EngineWaits:
    def __init__(self) -> None:
        self._waiting: dict[asyncio.Task[object], bool] = {}  # task -> failed by fail_all
        self.failed = 0  # requests failed, for the metric
        self.answers = 0  # waits vLLM ended by answering (a response opened, bytes read)

    def on_engine(self) -> _Wait:
        return _Wait(self)

    def fail_all(self) -> int:
        """Fail every request waiting on vLLM now; returns how many."""
        count = 0
        for task, failed in list(self._waiting.items()):
            if not failed:
                self._waiting[task] = True
                task.cancel()
                count += 1
        self.failed += count
        return count

    @property
    def waiting(self) -> int:
        return len(self._waiting)


class _Wait:
    """One await on vLLM; a cancellation by `fail_all` comes out as EngineHung."""

    __slots__ = ("_task", "_waits")

    def __init__(self, waits: EngineWaits) -> None:
        self._waits = waits
        self._task: asyncio.Task[object] | None = None

    def __enter__(self) -> None:
        self._task = asyncio.current_task()
        if self._task is not None:
            self._waits._waiting[self._task] = False

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        task = self._task
        if task is None:
            return
        failed = self._waits._waiting.pop(task, False)
        if kind is None:
            self._waits.answers += 1
        if failed and kind is asyncio.CancelledError:
            task.uncancel()  # the cancellation was ours: not the client's, not shutdown's
            raise EngineHung("vLLM has been hung too long") from None
