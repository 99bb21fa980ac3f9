"""Stop waiting for work whose client has left before its answer started.

uvicorn never cancels a request's task when its client disconnects: the task hears of it only
from `receive()` (an `http.disconnect` message), and what it sends afterwards is dropped. A
route that awaits something long before it answers (the gateway waiting for a replica's first
byte, spilling to the next candidate, or reading a whole non-stream completion; the agent
waiting for vLLM) would wait, and keep the engine generating, for nobody, holding the
request's reservation and in-flight counts all the while. Once a streamed answer has started,
Starlette's `StreamingResponse` watches for the disconnect itself.

`unless_client_leaves(receive, work)` runs `work` while watching `receive()`; when the client
leaves first, `work` is cancelled (its own cleanup runs: connections closed, counts given
back) and `ClientDisconnect` is raised. The request's body must have been read already: the
watcher takes every message `receive()` hands out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect

__all__ = ["ClientDisconnect", "unless_client_leaves"]

T = TypeVar("T")
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect (uvicorn repeats it)
            return


async def unless_client_leaves(receive: Receive, work: Coroutine[Any, Any, T]) -> T:
    """`await work`; if the client disconnects first, `work` is cancelled (and awaited) and
    `ClientDisconnect` raised."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this request itself is cancelled: neither task outlives it
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task  # its cleanup (connections, counts) runs before the caller's
    if task.cancelled():
        raise ClientDisconnect
    return task.result()  # the work's result or its own exception
