"""Operator settings (env prefix LORAFLEET_OPERATOR_), one class for the whole component."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from lorafleet_core.kube.token_review import parse_accounts
from lorafleet_core.planning.adapters import REPLICA_TOKENS_PER_SECOND
from lorafleet_core.planning.merge_advice import MERGE_THRESHOLD_SHARE
from lorafleet_core.planning.replica_config import InsideAuth
from lorafleet_core.web.secret_file import bearer_token_reader
from lorafleet_core.wire.agent_api import INTERNAL_AUDIENCE


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LORAFLEET_OPERATOR_", extra="ignore")

    api_server: str | None = Field(
        default=None,
        description="Kubernetes API URL. Unset: in-cluster service account, then kubeconfig.",
    )
    api_token: SecretStr | None = Field(default=None, description="Bearer token for api_server.")
    insecure: bool = Field(default=False, description="Skip TLS verification of api_server.")
    namespaces: str = Field(
        default="", description="Comma-separated namespaces to serve; empty = cluster-wide."
    )
    liveness_endpoint: str | None = Field(
        default=None,
        description="kopf liveness endpoint, e.g. http://0.0.0.0:8080/healthz (the Helm chart "
        "sets it and probes it); unset: none.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of the Prometheus /metrics endpoint (the Helm chart sets 9090); "
        "unset: not served; 0: any free port.",
    )
    standalone: bool = Field(
        default=True, description="Run without kopf peering (one operator replica)."
    )
    sync_debounce_seconds: float = Field(
        default=0.5,
        gt=0,
        description="Quiet time after the last change before a sync pass; bursts coalesce.",
    )
    sync_max_delay_seconds: float = Field(
        default=3.0,
        gt=0,
        description="Longest a change waits for a sync pass while events keep arriving.",
    )
    pod_patch_interval_seconds: float = Field(
        default=10.0,
        ge=0,
        description="Least time between two owned-adapters patches of one pod (bulk changes "
        "coalesce); deletions flush at once.",
    )
    write_concurrency: int = Field(default=16, ge=1, description="Parallel API writes per pass.")
    replica_tokens_per_second: float = Field(
        default=REPLICA_TOKENS_PER_SECOND,
        gt=0,
        description="Generated tokens/s one replica serves (design: 32 sequences at 50 ms per "
        "token = 640); sizes hot adapters' owners. Set it from a measurement of the pool's GPU.",
    )
    hot_adapter_share: float = Field(
        default=0.5, gt=0, le=1, description="Most of a replica's capacity one adapter may use."
    )
    merge_threshold_share: float = Field(
        default=MERGE_THRESHOLD_SHARE,
        gt=0,
        description="An adapter sustaining more than this share of replica_tokens_per_second "
        "gets MergedPoolRecommended (and, with the pool's autoMerge, a merged pool); the "
        "default is where the fleet simulator finds the merged pool winning.",
    )
    scrape_timeout_seconds: float = Field(
        default=2.0, gt=0, description="Per-replica /state timeout of the autoscaler's scrape."
    )
    merged_store_prefix: str | None = Field(
        default=None,
        pattern=r"^(s3|file)://.+$",
        description="Where merge Jobs store merged weights (s3://bucket/prefix); unset: "
        "s3://<the adapter's bucket>/lorafleet-merged.",
    )
    agent_internal_port: int = Field(
        default=8101, description="Agent internal port when the pod does not name one."
    )

    # --- the control API (lorafleet_operator.control; docs/reference/control-api.md) ---------
    control_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of the control API; unset: not served; 0: any free port.",
    )
    control_host: str = Field(default="0.0.0.0", description="Address the control API binds.")  # noqa: S104
    control_token_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 (hex) of the admin token; only the hash is ever configured.",
    )
    control_token_sha256_file: Path | None = Field(
        default=None, description="File holding that hash (a mounted Secret); re-read on change."
    )
    control_service_accounts: str = Field(
        default="",
        description="Comma-separated namespace:name ServiceAccounts whose tokens the control "
        "API accepts, checked by TokenReview (cluster mode only); empty: none.",
    )
    control_namespace: str | None = Field(
        default=None,
        description="Namespace the control API writes in; unset: the first of `namespaces`, "
        "else default.",
    )
    control_manifests: Path | None = Field(
        default=None,
        description="Standalone mode: the manifests folder the control API writes to (instead "
        "of a cluster).",
    )
    control_replicas_file: Path | None = Field(
        default=None,
        description="Standalone mode: the replicas file (default: the one in control_manifests).",
    )
    replica_token: SecretStr | None = Field(
        default=None,
        description="The agents' internal credential, sent on forwarded load/unload calls "
        "and on forget when a LoRAAdapter is deleted.",
    )
    replica_token_file: Path | None = Field(
        default=None, description="File holding the agents' internal credential."
    )
    replica_data_token: SecretStr | None = Field(
        default=None,
        description="The agents' data-port token, copied into the Secret of each merged pool "
        "the operator creates (the operator sends no completions).",
    )
    replica_data_token_file: Path | None = Field(
        default=None, description="File holding the agents' data-port token."
    )
    internal_secret: str | None = Field(
        default=None,
        description="Name of the gateway pool's inside Secret (vllm-api-key, agent-token, "
        "data-token), created with new tokens when it is missing; unset: someone else creates "
        "it.",
    )
    internal_secret_recheck_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How often the operator makes sure internal_secret exists (a create that "
        "conflicts when it does): a deleted Secret is recreated, with new tokens, within this "
        "time.",
    )

    # How the replica pods this operator renders authenticate their callers (chart value
    # `internalAuth`; planning.replica_config.InsideAuth).
    replica_internal_auth: Literal["secret", "tokenReview"] = Field(
        default="secret",
        description="secret: the pool Secret's shared token; tokenReview: projected "
        "ServiceAccount tokens verified by the API server.",
    )
    replica_token_audience: str = Field(
        default=INTERNAL_AUDIENCE, description="tokenReview: the audience callers' tokens carry."
    )
    replica_callers: str = Field(
        default="",
        description="tokenReview: comma-separated namespace:name ServiceAccounts allowed to "
        "load/unload on the agents (the gateway's and the operator's).",
    )
    replica_service_account: str | None = Field(
        default=None,
        description="The agents' ServiceAccount (RBAC for TokenReview and Events); set: the "
        "agents post Events. A pool's spec.template.serviceAccountName wins over it.",
    )
    access_review_interval_seconds: float = Field(
        default=300.0,
        gt=0,
        description="tokenReview: how long the answer of a SubjectAccessReview of a pool's "
        "ServiceAccount is kept (every pool of one account shares it) before it is asked "
        "again; a fixed RBAC binding shows on the pool's AgentPermissions condition within "
        "this time.",
    )

    def inside_auth(self) -> InsideAuth:
        return InsideAuth(
            mode=self.replica_internal_auth,
            audience=self.replica_token_audience,
            callers=tuple(sorted(parse_accounts(self.replica_callers))),
            service_account=self.replica_service_account or None,
        )

    def replica_token_reader(self) -> Callable[[], str | None]:
        """The agents' internal credential (a projected ServiceAccount token or the Secret's
        token), read again whenever its file changes, so a rotated token is picked up."""
        return bearer_token_reader(self.replica_token, self.replica_token_file)

    def control_namespace_name(self) -> str:
        return self.control_namespace or next(iter(self.namespace_list()), "default")

    def namespace_list(self) -> list[str]:
        return [n.strip() for n in self.namespaces.split(",") if n.strip()]
