"""Per-tenant token buckets in Redis, shared by every gateway pod (`rate_limit_backend: redis`).

The same two buckets and the same answers as the in-memory `ratelimit.RateLimiter` (requests
per second with a one-second burst, tokens per minute with a one-minute burst; `settle` refunds
or charges the difference between estimate and usage), but held in one Redis hash per tenant
and updated by Lua scripts, which Redis runs atomically: two pods admitting the same tenant's
requests at the same instant cannot both take the last token. The scripts read Redis' own
clock (`TIME`), so the pods' clocks do not matter.

Bounded state: each hash expires once its buckets would have refilled completely (an idle
tenant's state is then exactly "full", the same as no state).

Redis down (or slower than `timeout_s`) is a stated choice, `on_error`:
- "open" (default): the request is admitted unchecked and
  `lorafleet_gateway_rate_limit_backend_errors_total{operation}` counts it; serving continues
  with no limits rather than failing every request because a cache is gone;
- "closed": refused with a 429 (retry after `retry_s`).
After an error the limiter does not ask Redis again for `retry_s`, so an outage costs no
per-request timeout; `lorafleet_gateway_rate_limit_backend_up` is 0 meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from prometheus_client import Counter, Gauge
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from lorafleet_gateway.ratelimit import Decision, Limits

log = logging.getLogger(__name__)

# KEYS[1] tenant hash; ARGV: request rate, request burst, token rate (per s), token burst,
# estimated tokens. Returns {status, wait_s as string, limit}: 1 admitted, 0 refused, 2 too
# large. Fields: r/t the two bucket levels, rts/tts when each was last refilled (s; settle
# refills only the token bucket, so each keeps its own clock), tr/tc the token rate and
# capacity (settle needs them).
ACQUIRE = """
local rps, rcap = tonumber(ARGV[1]), tonumber(ARGV[2])
local trate, tcap = tonumber(ARGV[3]), tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'r', 'rts', 't', 'tts')
-- No state: a full bucket (what an idle tenant's state would have refilled to).
local r = tonumber(s[1]) or rcap
local t = tonumber(s[3]) or tcap
r = math.min(rcap, r + math.max(0, now - (tonumber(s[2]) or now)) * rps)
t = math.min(tcap, t + math.max(0, now - (tonumber(s[4]) or now)) * trate)
local status, wait, limit = 1, 0, ''
if cost > tcap then
  status, wait, limit = 2, 60, 'tokens'
else
  local wr = math.max(0, (1 - r) / rps)
  local wt = math.max(0, (cost - t) / trate)
  if wr > 0 or wt > 0 then
    status, wait = 0, math.max(wr, wt)
    if wr >= wt then limit = 'requests' else limit = 'tokens' end
  else
    r, t = r - 1, t - cost
  end
end
redis.call('HSET', KEYS[1], 'r', string.format('%.17g', r), 't', string.format('%.17g', t),
           'rts', string.format('%.17g', now), 'tts', string.format('%.17g', now),
           'tr', string.format('%.17g', trate), 'tc', string.format('%.17g', tcap))
-- Capped at 100 years and written as an integer: Redis refuses an EXPIRE of '1e+20', which
-- a tenant limit of 1e-20 requests/s made, and the script's error failed every tenant open.
local ttl = math.min(math.ceil(math.max(rcap / rps, tcap / trate)) + 1, 3153600000)
redis.call('EXPIRE', KEYS[1], string.format('%d', ttl))
return {status, string.format('%.17g', wait), limit}
"""

# KEYS[1] tenant hash; ARGV[1] tokens to give back (negative: charge). No state: nothing to do
# (an expired hash is a full bucket already). Refills the token bucket to now first, as the
# in-memory limiter does, and leaves the request bucket and its clock alone.
SETTLE = """
local s = redis.call('HMGET', KEYS[1], 't', 'tts', 'tr', 'tc')
if not s[1] then return 0 end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local trate, tcap = tonumber(s[3]), tonumber(s[4])
local t = math.min(tcap, tonumber(s[1]) + math.max(0, now - tonumber(s[2])) * trate)
t = math.min(tcap, t + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 't', string.format('%.17g', t), 'tts', string.format('%.17g', now))
return 1
"""


class RedisRateLimiter:
    """`ratelimit.Limiter` over Redis; see the module docstring for the failure mode."""

    def __init__(
        self,
        client: Redis,
        defaults: Limits,
        *,
        prefix: str = "lorafleet:ratelimit",
        on_error: Literal["open", "closed"] = "open",
        retry_s: float = 1.0,
        errors: Counter | None = None,
        up: Gauge | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.defaults = defaults
        self.prefix = prefix
        self.on_error = on_error
        self.retry_s = retry_s
        self._errors = errors
        self._up = up
        self.clock = clock
        self._down_until = 0.0
        self._acquire = client.register_script(ACQUIRE)
        self._settle = client.register_script(SETTLE)

    @classmethod
    def from_url(
        cls, url: str, defaults: Limits, *, password: str | None, timeout_s: float, **kw: Any
    ) -> RedisRateLimiter:
        client = Redis.from_url(
            url,
            password=password,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            # One try: a retry would double the time a request waits on a Redis that is down.
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
        )
        return cls(client, defaults, **kw)

    def key(self, tenant: str) -> str:
        return f"{self.prefix}:{tenant}"

    @property
    def backend_up(self) -> bool:
        return self.clock() >= self._down_until

    async def acquire(self, tenant: str, tokens: int, limits: Limits | None = None) -> Decision:
        limits = limits or self.defaults
        if not self.backend_up:
            return self._unavailable("acquire")
        rps = limits.requests_per_second
        tpm = float(limits.tokens_per_minute)
        args = [rps, max(1.0, rps), tpm / 60.0, tpm, tokens]
        try:
            status, wait, limit = await self._acquire(keys=[self.key(tenant)], args=args)
        except (RedisError, OSError) as exc:
            return self._failed("acquire", exc)
        self._mark_up()
        if int(status) == 1:
            return Decision(True)
        name = limit.decode() if isinstance(limit, bytes) else str(limit)
        return Decision(False, float(wait), name, too_large=int(status) == 2)

    async def settle(self, tenant: str, estimated: int, actual: int) -> None:
        if estimated == actual or not self.backend_up:
            return
        try:
            await self._settle(keys=[self.key(tenant)], args=[estimated - actual])
        except (RedisError, OSError) as exc:
            self._failed("settle", exc)
            return
        self._mark_up()

    async def aclose(self) -> None:
        await self.client.aclose()

    def _failed(self, operation: str, exc: BaseException) -> Decision:
        if self.backend_up:
            log.warning(
                "rate-limit backend unavailable (%s: %s); failing %s", operation, exc, self.on_error
            )
        self._down_until = self.clock() + self.retry_s
        if self._up is not None:
            self._up.set(0)
        return self._unavailable(operation)

    def _unavailable(self, operation: str) -> Decision:
        if self._errors is not None:
            self._errors.labels(operation).inc()
        if self.on_error == "open":
            return Decision(True)
        return Decision(False, self.retry_s, "requests")

    def _mark_up(self) -> None:
        if self._up is not None:
            self._up.set(1)
