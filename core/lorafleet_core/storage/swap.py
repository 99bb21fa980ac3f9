"""Compare-and-swap writes of one object, in a folder or in a cluster.

A writer that reads an object, decides and writes it back must not overwrite a change another
process made in between (two control-API replicas, the control API and `lorafleet alias set`):
both would answer with the same previous adapter, and one deploy would be lost. So the write
names what was read and is refused (`WriteConflict`) when the object changed since; the writer
reads, decides and writes again, a bounded number of times (`retry_swaps`).

- A cluster: a create is a create (409 when the name was taken meanwhile); an update is a JSON
  merge patch carrying the object's `metadata.resourceVersion` as read (`precondition_patch`),
  which the API server refuses with 409 Conflict once the object has changed.
- A folder (standalone): the writer holds the folder's inter-process lock
  (manifests.folder_lock) around its whole read, decide and write, so it never loses (a
  writer re-reading forty manifests is slower than one that only writes, and would starve);
  `swap_in_folder_locked` still compares the object on disk with what was read before it
  writes the new one, replaced atomically (a watcher never reads half a file).

Every writer of an AdapterAlias spec goes through here; lorafleet_core.planning.alias_deploy
decides the body.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from lorafleet_core.storage.manifests import folder_lock, load_folder, write_object_locked

T = TypeVar("T")
Obj = Mapping[str, Any]

# Each refusal means another writer's write landed: with a handful of writers racing on one
# object, every one of them lands within a few tries.
SWAP_TRIES = 8
_BACKOFF_S = 0.005  # doubled each try, randomised so racing writers fall out of step


class WriteConflict(Exception):
    """The object changed, appeared or vanished since it was read: read it again."""


def _pause(attempt: int) -> float:
    return random.uniform(0, _BACKOFF_S * 2**attempt)  # noqa: S311 (jitter, not a secret)


def retry_swaps(attempt: Callable[[], T], tries: int = SWAP_TRIES) -> T:
    """`attempt()` (read, decide, swap), again after each WriteConflict; the last one's
    WriteConflict propagates after `tries` tries."""
    for i in range(tries - 1):
        try:
            return attempt()
        except WriteConflict:
            time.sleep(_pause(i))
    return attempt()


async def retry_swaps_async(attempt: Callable[[], Awaitable[T]], tries: int = SWAP_TRIES) -> T:
    """`retry_swaps` for async writers."""
    for i in range(tries - 1):
        try:
            return await attempt()
        except WriteConflict:
            await asyncio.sleep(_pause(i))
    return await attempt()


def precondition_patch(body: Obj, expected: Obj) -> dict[str, Any]:
    """The JSON merge patch writing `body`'s spec over `expected` (the object as read) only if
    it is still that version: its resourceVersion rides along as the precondition."""
    version = (expected.get("metadata") or {}).get("resourceVersion")
    if not version:
        name = (expected.get("metadata") or {}).get("name")
        raise ValueError(f"{expected.get('kind')} {name} as read has no resourceVersion")
    return {"metadata": {"resourceVersion": str(version)}, "spec": dict(body["spec"])}


def _content(obj: Obj) -> dict[str, Any]:
    # Status is not in a folder's manifests: a reader may have added the reconciler's.
    return {k: v for k, v in obj.items() if k != "status"}


def swap_in_folder(folder: Path, body: dict[str, Any], expected: Obj | None) -> Path:
    """Write `body` into the folder if its object is still `expected` as read (None: it must
    not exist yet, a create); returns the file written. Raises WriteConflict otherwise."""
    folder.mkdir(parents=True, exist_ok=True)
    with folder_lock(folder):
        return swap_in_folder_locked(folder, body, expected)


def swap_in_folder_locked(folder: Path, body: dict[str, Any], expected: Obj | None) -> Path:
    """`swap_in_folder` for a caller holding `folder_lock(folder)` (since it read `expected`)."""
    kind, name = str(body["kind"]), str(body["metadata"]["name"])
    current = load_folder(folder).find(kind, name)
    if expected is None and current is not None:
        raise WriteConflict(f"{kind} {name} was created meanwhile in {folder}")
    if expected is not None and (current is None or _content(current.body) != _content(expected)):
        raise WriteConflict(f"{kind} {name} changed meanwhile in {folder}")
    return write_object_locked(folder, body)
