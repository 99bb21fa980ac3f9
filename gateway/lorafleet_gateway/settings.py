"""GatewaySettings: every knob of the gateway, from `LORAFLEET_GATEWAY_*` environment variables."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from lorafleet_core.planning.tokens import DEFAULT_MAX_TOKENS
from lorafleet_gateway.router import MERGED_MAX_QUEUE_DEPTH, MERGED_MAX_TOKENS_IN_FLIGHT

log = logging.getLogger(__name__)


class GatewaySettings(BaseSettings):
    """Settings of one gateway process (env prefix `LORAFLEET_GATEWAY_`)."""

    model_config = SettingsConfigDict(env_prefix="LORAFLEET_GATEWAY_", extra="ignore")

    # Ports: the public one speaks only the OpenAI API; metrics and probes live on the internal one
    # so a NetworkPolicy can keep them off the internet.
    # A server in a pod listens on all interfaces.
    host: str = Field(default="0.0.0.0", description="address both ports listen on")  # noqa: S104
    port: int = Field(default=8080, ge=0, le=65535, description="the public OpenAI API")
    internal_port: int = Field(
        default=9090, ge=0, le=65535, description="metrics and probes (never public)"
    )

    # Catalog source: a folder of manifests (standalone) or Kubernetes watches.
    catalog: Literal["files", "kubernetes"] = Field(
        default="files",
        description="where aliases, adapters, keys and replicas come from: a manifests folder "
        "(standalone) or watches on the cluster",
    )
    manifests_dir: Path = Field(
        default=Path(".lorafleet/manifests"), description="files catalog: the manifests folder"
    )
    replicas_file: Path | None = Field(
        default=None,
        description="replicas.yaml/json listing replica endpoints in standalone mode; default: "
        "<manifests_dir>/replicas.yaml or replicas.json",
    )
    catalog_reload_interval_s: float = Field(
        default=1.0, gt=0, description="files catalog: how often the folder is read again"
    )
    namespace: str = Field(default="default", description="kubernetes catalog: the namespace")
    pool: str = Field(
        default="default",
        description="the gateway's own ReplicaPool: it serves every pool of this pool's base "
        "model in the namespace (rank classes, merged pools), unless `pools` lists them",
    )
    pools: str = Field(
        default="",
        description="ReplicaPools to serve, comma-separated (e.g. `default`: that pool alone); "
        "empty: every pool with the base model of `pool`",
    )

    @property
    def pool_names(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.pools.split(",") if p.strip())

    replica_data_port: int = Field(
        default=8100, description="kubernetes catalog: the agents' data port (completions)"
    )
    replica_internal_port: int = Field(
        default=8101, description="kubernetes catalog: the agents' internal port (/state, load)"
    )

    # The credential replicas' agents require on their internal load endpoint: the gateway is
    # the registry's authority for on-demand loads. A mounted Secret on a cluster, a generated
    # value in standalone mode (see docs/reference/agent.md, "Inside the pod").
    replica_token: SecretStr | None = Field(
        default=None,
        description="the agents' internal credential, sent on on-demand load calls",
    )
    replica_token_file: Path | None = Field(
        default=None,
        description="file holding that credential, re-read when it changes (a projected "
        "ServiceAccount token with internalAuth tokenReview, else the pool Secret)",
    )
    # The credential replicas' agents require on their data port (completions): without it any
    # pod reaching a replica could use any tenant's adapter. Its own token, always a shared
    # secret (lorafleet_agent.data_auth says why): the pool Secret's `data-token`.
    replica_data_token: SecretStr | None = Field(
        default=None,
        description="the agents' data-port credential, sent with every completion forwarded "
        "(the client's own key never goes upstream)",
    )
    replica_data_token_file: Path | None = Field(
        default=None, description="file holding that credential (the pool Secret's data-token)"
    )

    # Replica state polling and load thresholds (per replica).
    poll_interval_s: float = Field(
        default=1.0, gt=0, description="how often each replica's /state is polled"
    )
    max_tokens_in_flight: int = Field(
        default=16384, ge=1, description="a replica above this is overloaded"
    )
    max_queue_depth: int = Field(default=32, ge=0, description="a replica above this is overloaded")
    max_attempts: int = Field(default=3, ge=1, description="replicas tried per request")

    # Routing policy (lorafleet_gateway.router; each rule measured in the simulator first,
    # docs/design/0006). `random` and `least_loaded` are baselines for A/B tests.
    routing_policy: Literal["affinity", "least_loaded", "random"] = Field(
        default="affinity",
        description="affinity: the adapter's owners, the one holding it in a GPU slot first; "
        "least_loaded: the least-loaded owner, residency ignored; random: uniform over "
        "healthy replicas",
    )
    routing_balance: float = Field(
        default=1.25,
        ge=0,
        allow_inf_nan=False,
        description="a replica is also overloaded above this x the fleet's mean tokens in "
        "flight (bounded load); 0 = max_tokens_in_flight alone",
    )
    merged_max_queue_depth: int = Field(
        default=MERGED_MAX_QUEUE_DEPTH,
        ge=0,
        description="a merged pool's replica with more requests admitted and not yet "
        "streaming is full: its adapter's request spills to the shared pool; 0 = no bound",
    )
    merged_max_tokens_in_flight: int = Field(
        default=MERGED_MAX_TOKENS_IN_FLIGHT,
        ge=0,
        description="a merged pool's replica with more tokens in flight (prompt + max_tokens) "
        "is full: its adapter's request spills to the shared pool; 0 = no bound",
    )
    routing_spill: Literal["rendezvous", "least_loaded"] = Field(
        default="rendezvous",
        description="where a request goes when every owner is overloaded: the next replica "
        "in the adapter's rendezvous order (stays cached there) or the least-loaded replica",
    )

    # Rate limits (defaults; a tenant's key Secret may override them).
    requests_per_second: float = Field(
        default=20.0, gt=0, description="a tenant's request rate unless its key Secret says"
    )
    tokens_per_minute: int = Field(
        default=200_000,
        gt=0,
        description="a tenant's token rate (prompt estimate + output bound, settled with the "
        "engine's usage) unless its key Secret says",
    )
    max_concurrent_requests: int = Field(
        default=64,
        ge=0,
        description="requests (streams included) one tenant may have running at once on this "
        "gateway pod; one more is 429 concurrency_limit_exceeded; 0 = no cap. Per pod: with "
        "P gateway pods a tenant may run up to P x this",
    )
    rate_limit_tenants_max: int = Field(default=20_000, ge=1, description="bucket state kept")
    rate_limit_backend: Literal["memory", "redis"] = Field(
        default="memory",
        description="memory: buckets in this process (standalone, one gateway); redis: buckets "
        "shared by every gateway pod through `rate_limit_redis_url`",
    )
    rate_limit_redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="redis:// or rediss:// URL (a password goes in the URL or "
        "LORAFLEET_GATEWAY_RATE_LIMIT_REDIS_PASSWORD)",
    )
    rate_limit_redis_password: str | None = Field(
        default=None, repr=False, description="Redis password, if not in the URL"
    )
    rate_limit_redis_prefix: str = Field(
        default="lorafleet:ratelimit", min_length=1, description="prefix of the Redis keys"
    )
    rate_limit_redis_timeout_s: float = Field(
        default=0.05, gt=0, description="per call; a slower Redis counts as down"
    )
    rate_limit_on_backend_error: Literal["open", "closed"] = Field(
        default="open",
        description="Redis down: open admits requests unchecked (counted in "
        "lorafleet_gateway_rate_limit_backend_errors_total), closed refuses them with 429",
    )
    rate_limit_backend_retry_s: float = Field(
        default=1.0,
        gt=0,
        description="after a Redis error, decide by the failure mode without asking Redis "
        "for this long (no per-request timeout while it is down)",
    )

    # Request bounds.
    max_body_bytes: int = Field(
        default=1_048_576, ge=1024, description="largest request body (413 past it)"
    )
    answer_buffer_bytes: int = Field(
        default=256 * 1024,
        ge=4096,
        description="a non-stream answer up to this is held whole (retried elsewhere if the "
        "replica fails inside it); a longer one is relayed as it arrives",
    )
    max_tokens_limit: int = Field(default=4096, ge=1, description="largest max_tokens accepted")
    default_max_tokens: int = Field(
        default=DEFAULT_MAX_TOKENS,
        ge=1,
        description="assumed output length when the request sets none (token estimate only)",
    )
    max_messages: int = Field(
        default=256, ge=1, description="most messages (Responses: input items) per request"
    )
    max_n: int = Field(default=4, ge=1, le=128, description="most choices (n) per request")
    max_json_depth: int = Field(default=64, ge=2, description="deepest JSON nesting accepted")
    max_model_name_chars: int = Field(
        default=256, ge=16, description="longest `model` accepted (400 past it)"
    )

    # Edge limits (see edge.py): what a client may cost before the gateway knows who it is.
    max_header_bytes: int = Field(
        default=32_768, ge=1024, description="request line + headers; larger is answered 431"
    )
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="from connection (or request start) to complete headers"
    )
    body_timeout_s: float = Field(default=30.0, gt=0, description="to receive the whole body")
    max_buffered_body_bytes_per_key: int = Field(
        default=64 << 20,
        ge=1024,
        description="bytes of one key's request bodies being received at once (429 past it)",
    )
    max_buffered_body_bytes: int = Field(
        default=256 << 20,
        ge=1024,
        description="bytes of all request bodies being received at once (503 past it)",
    )
    write_timeout_s: float = Field(
        default=60.0, gt=0, description="a client that accepts no bytes this long is cut"
    )
    keep_alive_timeout_s: float = Field(
        default=5.0, gt=0, description="an idle keep-alive connection is closed after this"
    )
    failed_requests_per_second: float = Field(
        default=5.0, gt=0, description="early failures (4xx) refilled per client address and key"
    )
    failed_requests_burst: int = Field(
        default=50, ge=1, description="early failures allowed at once before 429"
    )
    forwarded_allow_ips: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS", "FORWARDED_ALLOW_IPS"
        ),
        description="comma-separated proxy addresses or CIDRs (or *) whose X-Forwarded-For / "
        "X-Forwarded-Proto the public port believes; unset: none, the client address is the "
        "TCP peer's (uvicorn's default would trust 127.0.0.1, so any local process could pick "
        "the address the early-failure limit charges). Also read from uvicorn's own "
        "FORWARDED_ALLOW_IPS",
    )

    drain_timeout_s: int = Field(
        default=110,
        ge=0,
        description="on SIGTERM: how long running requests (streams) may take to finish while "
        "no new connection is accepted and /readyz answers 503; then they are cut. The chart "
        "sets it a little under the pod's termination grace period",
    )

    # Upstream timeouts.
    connect_timeout_s: float = Field(
        default=2.0, gt=0, description="to connect to a replica (then the next is tried)"
    )
    read_timeout_s: float = Field(
        default=300.0, gt=0, description="longest wait for a replica's next bytes"
    )

    # Observability.
    ttft_target_s: float = Field(
        default=1.0,
        gt=0,
        description="time-to-first-token target of the per-tenant SLO counters",
    )
    tenant_window_s: float = Field(
        default=300.0,
        gt=0,
        description="per-tenant SLO counters are exported for tenants active this recently",
    )
    log_level: str = Field(default="INFO", description="WARNING turns the request log off")


def settings_from_env() -> GatewaySettings:
    """The process's settings; invalid ones end the process (exit code 1) with a CRITICAL log
    line naming each bad variable.

    A wrong routing policy or bound must stop the gateway at start-up (the pod crash-loops
    with the reason in its log), not route by a default the operator did not choose.
    """
    try:
        return GatewaySettings()
    except ValidationError as exc:
        log.critical("%s", invalid_settings_message(exc))
        raise SystemExit(1) from None


def invalid_settings_message(exc: ValidationError) -> str:
    prefix = str(GatewaySettings.model_config.get("env_prefix", ""))
    lines = ["lorafleet gateway: invalid settings, not starting"]
    for error in exc.errors():
        name = prefix + "_".join(str(part) for part in error["loc"]).upper()
        lines.append(f"  {name}={error.get('input')!r}: {error['msg']}")
    return "\n".join(lines)
