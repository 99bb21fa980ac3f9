"""The gateway's long-lived parts, wired from settings: catalog, replica tracker, limiter."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import httpx

from lorafleet_core.api.apikeys import TenantKeys
from lorafleet_core.web.secret_file import bearer_token_reader
from lorafleet_gateway.body_budget import BodyBudget
from lorafleet_gateway.catalog import CatalogHolder, CatalogSource
from lorafleet_gateway.concurrency import ConcurrencyLimiter
from lorafleet_gateway.metrics import GatewayMetrics
from lorafleet_gateway.ratelimit import Limiter, Limits, RateLimiter
from lorafleet_gateway.replica_poller import ReplicaTracker
from lorafleet_gateway.router import Thresholds
from lorafleet_gateway.settings import GatewaySettings
from lorafleet_gateway.upstream import Upstream
from lorafleet_gateway.validation import Bounds

log = logging.getLogger(__name__)


def source_from_settings(settings: GatewaySettings, holder: CatalogHolder) -> CatalogSource:
    if settings.catalog == "kubernetes":
        from lorafleet_gateway.catalog_kube import KubeCatalog

        return KubeCatalog(
            holder,
            namespace=settings.namespace,
            pool=settings.pool,
            pools=settings.pool_names,
            data_port=settings.replica_data_port,
            internal_port=settings.replica_internal_port,
        )
    from lorafleet_gateway.catalog_files import FileCatalog

    return FileCatalog(
        holder,
        settings.manifests_dir,
        pool=settings.pool,
        pools=settings.pool_names,
        replicas_file=settings.replicas_file,
        interval_s=settings.catalog_reload_interval_s,
    )


async def _nothing_to_close() -> None:
    return None


def limiter_from_settings(
    settings: GatewaySettings, metrics: GatewayMetrics
) -> tuple[Limiter, Callable[[], Awaitable[None]]]:
    """The limiter `rate_limit_backend` names, and how to close it: in-memory buckets
    (standalone, one gateway) or Redis buckets shared by every gateway pod."""
    defaults = Limits(settings.requests_per_second, settings.tokens_per_minute)
    if settings.rate_limit_backend == "redis":
        # Imported here: the in-memory default needs no Redis client installed.
        from lorafleet_gateway.ratelimit_redis import RedisRateLimiter

        shared = RedisRateLimiter.from_url(
            settings.rate_limit_redis_url,
            defaults,
            password=settings.rate_limit_redis_password,
            timeout_s=settings.rate_limit_redis_timeout_s,
            prefix=settings.rate_limit_redis_prefix,
            on_error=settings.rate_limit_on_backend_error,
            retry_s=settings.rate_limit_backend_retry_s,
            errors=metrics.rate_limit_backend_errors,
            up=metrics.rate_limit_backend_up,
        )
        return shared, shared.aclose
    return RateLimiter(defaults, max_tenants=settings.rate_limit_tenants_max), _nothing_to_close


def thresholds_from_settings(settings: GatewaySettings) -> Thresholds:
    """The router's knobs as the settings name them."""
    return Thresholds(
        settings.max_tokens_in_flight,
        settings.max_queue_depth,
        balance=settings.routing_balance,
        spill=settings.routing_spill,
        policy=settings.routing_policy,
        merged_max_queue_depth=settings.merged_max_queue_depth,
        merged_max_tokens_in_flight=settings.merged_max_tokens_in_flight,
    )


class Gateway:
    def __init__(self, settings: GatewaySettings, source: CatalogSource | None = None) -> None:
        self.settings = settings
        self.holder = source.holder if source is not None else CatalogHolder()
        self.source = source or source_from_settings(settings, self.holder)
        self.metrics = GatewayMetrics(settings.tenant_window_s)
        self.holder.subscribe(lambda snap: self.metrics.usage.prime(snap.served_pairs()))
        self.holder.subscribe(
            lambda snap: self.metrics.alias_changes(
                {m: t.traffic() for m, t in snap.aliases.items()}
            )
        )
        self.limiter, self._close_limiter = limiter_from_settings(settings, self.metrics)
        self.concurrency = ConcurrencyLimiter()  # per pod, in memory (concurrency.py says why)
        # Request bodies being received (the edge reads them before any cap above applies).
        self.bodies = BodyBudget(
            settings.max_buffered_body_bytes_per_key, settings.max_buffered_body_bytes
        )
        self.thresholds = thresholds_from_settings(settings)
        self.bounds = Bounds(
            settings.max_body_bytes,
            settings.max_tokens_limit,
            settings.default_max_tokens,
            settings.max_messages,
            settings.max_json_depth,
            settings.max_model_name_chars,
            settings.max_n,
        )
        self.client = httpx.AsyncClient(
            # Answers are relayed byte for byte (upstream, relay): a compressed one would reach
            # the client without its Content-Encoding, so none is accepted.
            headers={"accept-encoding": "identity"},
            timeout=httpx.Timeout(
                settings.read_timeout_s, connect=settings.connect_timeout_s, pool=None
            ),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=512),
        )
        # Polls get their own connection pool: httpcore scans its pool on every request, so
        # keeping the pollers' connections out of the data pool keeps that scan short.
        self.poll_client = httpx.AsyncClient(
            timeout=settings.poll_interval_s, limits=httpx.Limits(max_keepalive_connections=256)
        )
        self.tracker = ReplicaTracker(self.poll_client, interval_s=settings.poll_interval_s)
        metrics = self.metrics
        self.upstream = Upstream(
            self.client,
            self.tracker,
            max_attempts=settings.max_attempts,
            answer_buffer_bytes=settings.answer_buffer_bytes,
            on_outcome=lambda outcome: metrics.child(metrics.routing, outcome).inc(),
            # The agents' internal credential: the setting, else the mounted file (a projected
            # ServiceAccount token or the Secret's token), re-read when the kubelet rotates it.
            replica_token=bearer_token_reader(settings.replica_token, settings.replica_token_file),
            data_token=bearer_token_reader(
                settings.replica_data_token, settings.replica_data_token_file
            ),
        )
        self._tasks: list[asyncio.Task[None]] = []
        # Set on SIGTERM (lorafleet_gateway.__main__): running streams finish, /readyz says 503.
        self.draining = False
        # Cleared by `serve` until the public socket is bound: the catalog and the first replica
        # poll finish before uvicorn binds, and the internal port is already up, so /readyz
        # would say ready while the public port still refuses connections.
        self.public_port_open = True

    def max_concurrent_for(self, tenant: TenantKeys) -> int:
        """The tenant's cap on requests at once on this pod (0: none)."""
        return tenant.max_concurrent_requests or self.settings.max_concurrent_requests

    def limits_for(self, tenant: TenantKeys) -> Limits:
        return Limits(
            tenant.requests_per_second or self.settings.requests_per_second,
            tenant.tokens_per_minute or self.settings.tokens_per_minute,
        )

    @property
    def ready(self) -> bool:
        return (
            self.public_port_open
            and self.holder.loaded
            and not self.draining
            and bool(self.tracker.healthy_ids())
        )

    async def start(self) -> None:
        await self.source.load_once()
        self.tracker.set_endpoints(self.holder.current.replicas)
        await self.tracker.poll_once()
        self._tasks = [
            asyncio.create_task(self.source.run(), name="catalog"),
            asyncio.create_task(
                self.tracker.run(lambda: self.holder.current.replicas), name="replica-poller"
            ),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        await self.client.aclose()
        await self.poll_client.aclose()
        await self._close_limiter()
