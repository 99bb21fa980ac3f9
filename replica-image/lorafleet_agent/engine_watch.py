"""Following vLLM's life: readiness mirrors vLLM's, and a restarted vLLM is resynchronised.

vLLM runs beside the agent and can die and come back on its own (the kubelet or `lorafleet up`
restarts the container/process) while the agent keeps running. A fresh vLLM holds no adapters,
so everything the agent believed registered would answer "model does not exist". Every
`interval_s` the watch:

- asks vLLM's `/health`; once vLLM refuses connections (it died), or has timed out
  `slow_limit` times in a row (hung), the agent is not ready (its `/readyz` and data port answer
  503, so the gateway sends not-yet-started requests to other replicas). One slow answer is not
  enough: a busy engine misses a deadline now and then. Nor is a slow answer while vLLM's
  answers still reach the agent (`EngineWaits.answers` moved since the last check): an engine
  that streams is alive, however late its `/health` (measured: a CPU engine streaming 48
  sequences missed its 2 s deadline three times in a row);
- once vLLM answers again, compares vLLM's `/v1/models` with what the agent registered
  (`AdapterManager.resync`): lost registrations are forgotten before the agent is ready again,
  so no request is sent for a name vLLM does not know; requests register what they need from
  disk on demand (disk copies re-verified first) while a background task registers the rest
  again. Re-registering hundreds of adapters first would keep the replica out for minutes.

A hung engine's requests are failed once it has been hung for `hung_fail_s`
(lorafleet_agent.engine_waits says why and how); a short stall keeps them.

The same resync also runs on the request path when vLLM answers "model does not exist" between
two polls (`AdapterManager.open_completion`), so no request sees that 404.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx

from lorafleet_agent.engine_waits import EngineWaits
from lorafleet_agent.manager import AdapterManager

log = logging.getLogger(__name__)


class EngineWatch:
    def __init__(
        self,
        manager: AdapterManager,
        interval_s: float,
        slow_limit: int = 3,
        *,
        waits: EngineWaits | None = None,
        hung_fail_s: float = 30.0,
    ) -> None:
        self.manager = manager
        self.waits = waits if waits is not None else EngineWaits()
        self.hung_fail_s = hung_fail_s
        self._hung_since: float | None = None  # when the engine was called hung
        self.interval_s = interval_s
        self.slow_limit = slow_limit
        self._slow = 0  # consecutive timed-out checks
        self._answers_seen = self.waits.answers
        self.rounds = 0  # completed checks (tests wait on it)

    async def run(self) -> None:
        while True:
            await self.once()
            await asyncio.sleep(self.interval_s)

    async def once(self) -> None:
        m = self.manager
        try:
            health = await m.vllm.health()
            if health == "ok":
                await m.resync()
        except httpx.TimeoutException:
            health = "slow"
        except httpx.HTTPError:
            health = "down"
        finally:
            self.rounds += 1
        answered = self.waits.answers != self._answers_seen
        self._answers_seen = self.waits.answers
        if health == "slow" and answered:
            health = "busy"  # answers flow: alive, only late to answer /health
        self._slow = self._slow + 1 if health == "slow" else 0
        if health == "slow" and self._slow >= self.slow_limit:
            self._down("vLLM is hung")
            self._fail_waits_past_bound()
            return
        self._hung_since = None
        if health == "down":
            self._down("vLLM is not answering")
            return
        if health in ("slow", "busy"):
            return  # undecided: keep the current readiness
        m.metrics.engine_up.set(1)
        if not m.ready:
            log.warning("vLLM answers again and the agent has resynchronised: ready")
            m.ready = True

    def _fail_waits_past_bound(self) -> None:
        now = time.monotonic()
        if self._hung_since is None:
            self._hung_since = now
        if now - self._hung_since < self.hung_fail_s:
            return  # maybe a stall it resumes from: its requests wait
        failed = self.waits.fail_all()
        if failed:
            self.manager.metrics.hung_engine_failed_requests.inc(failed)
            log.error(
                "vLLM hung for %.0f s: failed the %d requests waiting on it (retryable)",
                now - self._hung_since,
                failed,
            )

    def _down(self, why: str) -> None:
        self.manager.metrics.engine_up.set(0)
        if self.manager.ready:
            log.error("%s: not ready until it is back", why)
            self.manager.ready = False
