"""A credential read from a mounted file, parsed again only when the file changes.

Kubernetes updates a mounted Secret in place (a rotated token), so a reader must notice a new
file without re-reading it on every request: the file's mtime says when to parse it again.
The agent's internal token and the control API's admin-token hash both read theirs this way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


class SecretFile:
    """`current()`: `parse(text)` of the file's stripped text, or None when it is empty or
    unreadable (callers then refuse every credential until it is back)."""

    def __init__(self, path: Path, parse: Callable[[str], bytes]) -> None:
        self.path = path
        self.parse = parse
        self._state: tuple[float, bytes | None] = (-1.0, None)

    def current(self) -> bytes | None:
        try:
            mtime = self.path.stat().st_mtime
            if mtime != self._state[0]:
                text = self.path.read_text().strip()
                self._state = (mtime, self.parse(text) if text else None)
        except (OSError, ValueError):  # gone, unreadable, or not what `parse` accepts
            self._state = (-1.0, None)
        return self._state[1]
