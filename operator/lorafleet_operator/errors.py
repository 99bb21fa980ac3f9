"""The one place where failures become kopf outcomes.

Invalid input (a spec that can never work) -> kopf.PermanentError: kopf stops retrying, and
the handler has already written a condition saying why. Conflicts, missing dependencies and
not-ready-yet -> kopf.TemporaryError with a delay: kopf retries the handler later.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import aiohttp
import kopf
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

P = ParamSpec("P")
T = TypeVar("T")

CONFLICT_DELAY = 1.0
NOT_FOUND_DELAY = 5.0
SERVER_DELAY = 5.0
DEFAULT_DELAY = 10.0


class InvalidSpecError(ValueError):
    """The object's spec can never be served; retrying will not help."""


class NotReadyError(RuntimeError):
    """Something the handler needs is not there yet; retry after `delay` seconds."""

    def __init__(self, message: str, delay: float = 5.0) -> None:
        super().__init__(message)
        self.delay = delay


def to_kopf(exc: BaseException) -> kopf.PermanentError | kopf.TemporaryError:
    if isinstance(exc, (kopf.PermanentError, kopf.TemporaryError)):
        return exc
    if isinstance(exc, (InvalidSpecError, ValidationError)):
        return kopf.PermanentError(f"invalid spec: {exc}")
    if isinstance(exc, NotReadyError):
        return kopf.TemporaryError(str(exc), delay=exc.delay)
    if isinstance(exc, ApiException):
        code = int(exc.status or 0)
        if code == 409:
            return kopf.TemporaryError(f"conflict, retrying: {exc}", delay=CONFLICT_DELAY)
        if code == 404:
            return kopf.TemporaryError(f"not found yet: {exc}", delay=NOT_FOUND_DELAY)
        if code == 422 or code == 400:
            return kopf.PermanentError(f"API server refused the object: {exc.body!r}")
        return kopf.TemporaryError(f"API error {code}: {exc}", delay=SERVER_DELAY)
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return kopf.TemporaryError(f"API unreachable: {exc}", delay=SERVER_DELAY)
    return kopf.TemporaryError(f"{type(exc).__name__}: {exc}", delay=DEFAULT_DELAY)


def mapped(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Decorate an async kopf handler so every failure goes through `to_kopf`."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            raise to_kopf(exc) from exc

    return wrapper


def describe(exc: BaseException) -> str:
    """Short text for a condition message."""
    detail: Any = exc.body if isinstance(exc, ApiException) else exc
    return f"{type(exc).__name__}: {detail}"[:1000]
