"""A credential read from a mounted file, parsed again only when the file changes.

Kubernetes updates a mounted Secret or a projected ServiceAccount token in place (a rotated
token), so a reader must notice a new file without re-reading it on every request: the file's
mtime says when to parse it again. The agent's internal token, the control API's admin-token
hash and the token the gateway and operator send to the agents (`bearer_token_reader`) all read
theirs this way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import SecretStr

T = TypeVar("T")


class SecretFile(Generic[T]):
    """`current()`: `parse(text)` of the file's stripped text, or None when it is empty or
    unreadable (callers then refuse, or send, no credential until it is back)."""

    def __init__(self, path: Path, parse: Callable[[str], T]) -> None:
        self.path = path
        self.parse = parse
        self._state: tuple[float, T | None] = (-1.0, None)

    def current(self) -> T | None:
        try:
            mtime = self.path.stat().st_mtime
            if mtime != self._state[0]:
                text = self.path.read_text().strip()
                self._state = (mtime, self.parse(text) if text else None)
        except (OSError, ValueError):  # gone, unreadable, or not what `parse` accepts
            self._state = (-1.0, None)
        return self._state[1]


def bearer_token_reader(token: SecretStr | None, path: Path | None) -> Callable[[], str | None]:
    """The credential a caller sends: the fixed value, else the file's current text.

    On a cluster the file is a projected ServiceAccount token the kubelet rewrites before it
    expires, so it is read again whenever it changed, never once at start-up.
    """
    if token is not None:
        fixed = token.get_secret_value()
        return lambda: fixed
    if path is not None:
        return SecretFile(path, str).current
    return lambda: None
