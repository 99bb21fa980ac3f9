"""The disk tier: verified adapter folders under a byte budget, evicted least recently used.

`LruBytes` (the shared core's cache policy, `lorafleet_core.planning.cache_policy`) is the pure
bookkeeping; `DiskCache` does the file operations.
Layout: `<cache_dir>/<adapter id>/{adapter_config.json,adapter_model.safetensors}` plus
`<cache_dir>/.incoming/` for downloads in progress. A folder appears under its adapter id only
by an atomic rename after verification, so whatever sits there was verified once; the record's
checksum is checked again when a restarted agent adopts it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from lorafleet_core.planning.cache_policy import LruBytes
from lorafleet_core.storage.adapter_files import ADAPTER_FILES
from lorafleet_core.wire.records import is_adapter_id


class DiskCache:
    def __init__(self, root: Path, budget: int) -> None:
        self.root = root
        self.lru = LruBytes(budget)
        self._incoming = root / ".incoming"
        self._incoming.mkdir(parents=True, exist_ok=True)
        # Leftovers of a crash mid-download are never trusted.
        for stale in self._incoming.iterdir():
            shutil.rmtree(stale, ignore_errors=True)
        for folder in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime):
            if folder.name.startswith(".") or not folder.is_dir():
                continue
            if not is_adapter_id(folder.name):
                continue  # not a folder this cache made: neither adopted nor deleted
            if all((folder / n).is_file() for n in ADAPTER_FILES):
                self.lru.put(folder.name, _size(folder))
            else:
                shutil.rmtree(folder, ignore_errors=True)

    def path(self, adapter_id: str) -> Path:
        return self.root / adapter_id

    def has(self, adapter_id: str) -> bool:
        return adapter_id in self.lru and self.path(adapter_id).is_dir()

    def staging(self) -> Path:
        """A fresh private folder for one download."""
        return Path(tempfile.mkdtemp(dir=self._incoming))

    def commit(self, staging: Path, adapter_id: str) -> Path:
        """Atomically publish a verified staging folder under the adapter id."""
        final = self.path(adapter_id)
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
        self.lru.put(adapter_id, _size(final))
        return final

    def discard(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def evict(self, adapter_id: str) -> None:
        # Ids are DNS subdomains (every record is validated); `..` or `.` would name the
        # cache's parent or the cache itself. The one place a folder is deleted by its id.
        if not is_adapter_id(adapter_id):
            raise ValueError(f"not an adapter id: {adapter_id!r}")
        self.lru.remove(adapter_id)
        shutil.rmtree(self.path(adapter_id), ignore_errors=True)


def _size(folder: Path) -> int:
    return sum((folder / n).stat().st_size for n in ADAPTER_FILES if (folder / n).is_file())


__all__ = ["DiskCache", "LruBytes"]
