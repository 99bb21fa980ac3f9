"""The agent's one settings class (environment variables prefixed LORAFLEET_AGENT_)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lorafleet_core.api.models import ALL_TARGET_MODULES
from lorafleet_core.wire.agent_api import INTERNAL_AUDIENCE


class AgentSettings(BaseSettings):
    """Everything one replica agent needs; the Dockerfile and standalone mode set these."""

    model_config = SettingsConfigDict(env_prefix="LORAFLEET_AGENT_", extra="ignore")

    replica_id: str = Field(default="replica-0", description="stable id (StatefulSet pod name)")

    # Pool settings: what an adapter must satisfy before vLLM sees it.
    base_model_hash: str = Field(default="", description="sha256:<hex> of the pool's base model")
    base_model_dir: Path | None = Field(
        default=None, description="base model folder; its config.json gives the tensor shapes"
    )
    max_rank: int = Field(default=16, ge=1, description="must not exceed vLLM --max-lora-rank")
    allowed_target_modules: tuple[str, ...] = Field(
        default=ALL_TARGET_MODULES,
        description="modules an adapter may target (a JSON list); default: the seven Llama "
        "projections",
    )

    # vLLM behind the agent and its LoRA slot counts (the same numbers vLLM was started with).
    vllm_url: str = Field(
        default="http://127.0.0.1:8000", description="vLLM's OpenAI server in the same pod"
    )
    gpu_slots: int = Field(default=2, ge=1, description="vLLM --max-loras")
    cpu_slots: int = Field(default=4, ge=1, description="vLLM --max-cpu-loras")
    unload_unknown_on_start: bool = Field(
        default=True,
        description="unregister adapters vLLM holds that this agent has no record of "
        "(a restarted agent trusts nothing it did not verify itself); turn off when several "
        "agents share one vLLM in tests",
    )
    vllm_api_key: SecretStr | None = Field(
        default=None,
        description="the key vLLM was started with (its VLLM_API_KEY / --api-key); only the "
        "agent holds it, so nothing else can register adapters or complete through vLLM",
    )
    engine_check_s: float = Field(
        default=1.0, gt=0, description="how often vLLM's health and registrations are checked"
    )
    request_timeout_s: float = Field(
        default=600.0, description="longest wait for vLLM's next bytes of an answer"
    )
    engine_hung_fail_s: float = Field(
        default=30.0,
        gt=0,
        description="once vLLM has been hung this long, the requests waiting on it fail "
        "(503 before their answer started, cut after): a short stall keeps them",
    )
    vllm_start_timeout_s: float = Field(default=900.0, description="how long to wait for vLLM")

    # Disk tier.
    cache_dir: Path = Field(
        default=Path("/var/cache/lorafleet/adapters"), description="the disk tier's folder"
    )
    cache_bytes: int = Field(default=20 * 2**30, ge=1, description="disk cache byte budget")

    # Object store (s3://bucket/prefix/ or file:///path/).
    s3_endpoint_url: str | None = Field(
        default=None, description="S3 endpoint (MinIO, moto); unset: AWS"
    )
    s3_region: str = Field(default="us-east-1", description="S3 region")
    s3_access_key_id: str | None = Field(
        default=None, description="unset: boto3's credential chain (e.g. IRSA)"
    )
    s3_secret_access_key: str | None = Field(
        default=None, description="unset: boto3's credential chain (e.g. IRSA)"
    )

    # The window of the per-adapter traffic figures in /state (requests and GPU hits a minute,
    # tokens/s) the autoscaler and autoMerge plan from. Tests shorten it, so that a traffic
    # change shows in seconds (tests/standalone/test_up_auto_merge_e2e.py); keep the minute
    # otherwise.
    activity_window_s: float = Field(
        default=60.0, gt=0, description="window of the per-adapter traffic figures in /state"
    )

    # Pre-warm: downward-API projection of the pod's annotations.
    owned_adapters_file: Path | None = Field(
        default=None,
        description="the pod's owned-adapters annotation (downward API file); unset: no pre-warm",
    )
    prewarm_poll_s: float = Field(
        default=2.0, gt=0, description="how often that file is read for a change"
    )
    # A new replica reports `warming` in its state (and the gateway keeps requests off it while
    # other replicas serve) until its first pre-warm pass ends: its first requests would
    # otherwise fetch from the object store what the pass is about to load. Bounded, so a
    # broken store or an annotation that never arrives cannot keep a replica out for good.
    prewarm_ready_timeout_s: float = Field(
        default=180.0,
        ge=0,
        description="longest a replica reports warming after its engine is up; 0 = never",
    )

    # Internal-port credential: load and unload (which carry registry records) require
    # `Authorization: Bearer <token>`. `tokenReview` (a cluster): a projected ServiceAccount
    # token of one of `internal_service_accounts`, issued for `internal_audience`, verified by
    # the API server. `secret`: a shared token, a generated value in standalone mode or a
    # Secret-mounted file; without one the agent refuses to start unless explicitly allowed.
    internal_auth: Literal["secret", "tokenReview"] = Field(
        default="secret",
        description="how load/unload callers are checked: a shared token, or a projected "
        "ServiceAccount token verified by TokenReview",
    )
    internal_audience: str = Field(
        default=INTERNAL_AUDIENCE, description="tokenReview: the audience the token must carry"
    )
    internal_service_accounts: str = Field(
        default="",
        description="tokenReview: comma-separated namespace:name ServiceAccounts allowed to "
        "load and unload (the gateway's and the operator's)",
    )
    internal_review_cache_s: float = Field(
        default=30.0, ge=0, description="how long a positive TokenReview is trusted"
    )
    internal_token: SecretStr | None = Field(
        default=None, description="secret mode: the shared internal token"
    )
    internal_token_file: Path | None = Field(
        default=None, description="file holding the token (a mounted Secret); re-read on change"
    )
    allow_unauthenticated_internal: bool = Field(
        default=False, description="accept load/unload without a credential (never in production)"
    )

    # Data-port credential (lorafleet_agent.data_auth): completions require
    # `Authorization: Bearer <token>`, the gateway's; without one the agent refuses to start.
    data_token: SecretStr | None = Field(
        default=None, description="the token completions on the data port must carry"
    )
    data_token_file: Path | None = Field(
        default=None, description="file holding the data token (a mounted Secret); re-read"
    )
    allow_unauthenticated_data: bool = Field(
        default=False, description="serve completions without a credential (never in production)"
    )

    # Kubernetes API access (the pod's ServiceAccount): TokenReview, and Events (a record
    # conflict is posted as a Warning Event on the LoRAAdapter). Standalone: neither.
    kube_api_server: str | None = Field(
        default=None, description="explicit API server URL (tests); unset: in-cluster config"
    )
    kube_events: bool = Field(default=False, description="post Kubernetes Events (needs RBAC)")
    residency_info: bool = Field(
        default=False,
        description="export lorafleet_agent_adapter_residency_info: the ids in the gpu and ram "
        "tiers, for an external scheduler (kilobytes of label values, a new series per change)",
    )
    kube_event_interval_s: float = Field(
        default=30.0, gt=0, description="at most one write per Event per interval (count grows)"
    )
    pod_namespace: str = Field(default="default", description="downward API metadata.namespace")
    pod_uid: str | None = Field(default=None, description="downward API metadata.uid")

    # Merged pools (spec.merged): vLLM serves one adapter merged into the base weights under
    # the adapter's id as its model name, LoRA disabled. The agent verifies the folder against
    # the checksum before it is ready and admits only that adapter.
    merged_adapter_id: str | None = Field(
        default=None, description="the adapter vLLM serves merged (its --served-model-name)"
    )
    merged_checksum: str | None = Field(
        default=None, description="sha256:<hex> of the merged folder (status.merge.checksum)"
    )
    merged_model_dir: Path | None = Field(
        default=None, description="the merged model folder vLLM was started with"
    )

    # Ports.
    # A pod must listen on its pod IP.
    host: str = Field(default="0.0.0.0", description="address both ports listen on")  # noqa: S104
    data_port: int = Field(default=8100, description="completions from the gateway")
    internal_port: int = Field(default=8101, description="/state, load/unload, metrics, probes")
    # Both ports' HTTP limits (lorafleet_core.web.http_protocol): headers must be complete this
    # long after a connection or request starts (else 408); a peer that accepts no byte of an
    # answer for write_timeout_s is disconnected (longer than the gateway's 60 s, which cuts
    # its own stalled client first and so the stream behind it).
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="headers must be complete this long after a start"
    )
    write_timeout_s: float = Field(
        default=120.0, gt=0, description="a peer accepting no byte this long is disconnected"
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, description="a request body must be complete this long after its "
        "headers (else 408); the gateway sends each body whole"
    )  # fmt: skip

    @model_validator(mode="after")
    def _merged_settings_go_together(self) -> AgentSettings:
        merged = (self.merged_adapter_id, self.merged_checksum, self.merged_model_dir)
        if any(v is not None for v in merged) and any(v is None for v in merged):
            raise ValueError("merged_adapter_id, merged_checksum and merged_model_dir go together")
        return self
