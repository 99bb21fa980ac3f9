"""SubjectAccessReviews of pools' ServiceAccounts, asked once per account and interval.

Each pool's loop asks on every tick (handlers.autoscaler); pools sharing an account share one
answer, and concurrent ticks wait for the one review in flight, so a storm of reconciles costs
the API server one review per permission and account every `interval` seconds. A failed
review is kept as long as an answer: an operator that may not ask does not retry every tick.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from lorafleet_core.planning.agent_access import AccessCheck, Permission, subject_access_review

log = logging.getLogger(__name__)

Review = Callable[[dict[str, Any]], Awaitable[bool]]


class AccessReviews:
    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._answers: dict[tuple[str, str, tuple[Permission, ...]], tuple[float, AccessCheck]] = {}
        self._locks: dict[tuple[str, str, tuple[Permission, ...]], asyncio.Lock] = {}

    async def check(
        self, review: Review, namespace: str, account: str, needed: tuple[Permission, ...]
    ) -> AccessCheck:
        key = (namespace, account, needed)
        async with self._locks.setdefault(key, asyncio.Lock()):
            kept = self._answers.get(key)
            if kept is not None and self.clock() - kept[0] < self.interval:
                return kept[1]
            answer = await _ask(review, namespace, account, needed)
            self._answers[key] = (self.clock(), answer)
            if answer.missing or answer.error:
                log.warning(
                    "ServiceAccount %s/%s: missing %s%s",
                    namespace,
                    account,
                    ", ".join(map(str, answer.missing)) or "-",
                    f" (review failed: {answer.error})" if answer.error else "",
                )
            return answer


async def _ask(
    review: Review, namespace: str, account: str, needed: tuple[Permission, ...]
) -> AccessCheck:
    missing = []
    for perm in needed:
        try:
            allowed = await review(subject_access_review(namespace, account, perm))
        except ApiException as exc:
            return AccessCheck(namespace, account, error=f"{exc.status} {exc.reason}")
        if not allowed:
            missing.append(perm)
    return AccessCheck(namespace, account, tuple(missing))
