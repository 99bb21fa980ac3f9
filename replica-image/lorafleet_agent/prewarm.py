"""Pre-warm: pull the adapters this pod owns to disk and vLLM's RAM cache.

The operator writes the owned records into the pod annotation `lorafleet.dev/owned-adapters`;
the downward API projects the pod's annotations into a file (one `key="value"` per line) that
Kubernetes rewrites when the annotation changes. The agent polls the file: inotify does not
see the atomic symlink swap the kubelet does on every platform, and a poll every few seconds
costs nothing.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from lorafleet_agent.manager import AdapterManager
from lorafleet_core.names import ANNOTATION_OWNED_ADAPTERS
from lorafleet_core.records import AdapterRecord, decode_owned, parse_downward_annotations

log = logging.getLogger(__name__)


def read_owned(path: Path) -> list[AdapterRecord] | None:
    """The owned records in a downward-API annotations file; None when absent or malformed."""
    try:
        text = path.read_text()
        value = parse_downward_annotations(text).get(ANNOTATION_OWNED_ADAPTERS, "")
        return decode_owned(value)
    except FileNotFoundError:
        return None
    except ValueError as exc:  # pydantic's ValidationError and json errors are ValueErrors
        log.warning("ignoring malformed %s: %s", path, exc)
        return None


class PrewarmWatcher:
    def __init__(self, manager: AdapterManager, path: Path, poll_s: float) -> None:
        self.manager = manager
        self.path = path
        self.poll_s = poll_s
        self._last: list[AdapterRecord] | None = None

    async def run(self) -> None:
        while True:
            await self.once()
            await asyncio.sleep(self.poll_s)

    async def once(self) -> None:
        records = await asyncio.to_thread(read_owned, self.path)
        if records is None or records == self._last:
            return
        self._last = records
        # Only as many as vLLM's RAM cache holds: pre-warming more would evict each other.
        for record in records[: self.manager.slots.cpu_slots]:
            try:
                self.manager.add_record(record)
                await self.manager.ensure_registered(record.id)
            except Exception as exc:  # one bad adapter must not stop the others
                log.warning("pre-warm of %s failed: %s", record.id, exc)
        # The rest go to disk only.
        for record in records[self.manager.slots.cpu_slots :]:
            try:
                self.manager.add_record(record)
                await self.manager.ensure_on_disk(record.id)
            except Exception as exc:
                log.warning("pre-warm of %s failed: %s", record.id, exc)
