"""What a replica reports at GET /internal/replicas/{id}/state (gateway and operator read it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AdapterActivity(BaseModel):
    """One adapter's traffic on one replica over the last 60 s.

    Counts, not ratios, so the operator can add them up across replicas: the fleet's GPU hit
    rate of an adapter is the sum of `gpu_hits` over the sum of `requests`.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    requests: int = Field(default=0, ge=0, description="requests admitted in the window")
    gpu_hits: int = Field(
        default=0, ge=0, description="of those, requests that found the adapter in a GPU slot"
    )
    tokens_per_second: float = Field(default=0.0, ge=0, description="tokens/s served")


class MergedServing(BaseModel):
    """What a merged replica serves: one adapter merged into the base weights.

    The gateway sends an adapter's requests to a merged replica only when this names that
    adapter (and, when the pool's status names one, the same checksum): a replica serving
    another tenant's merged weights is never a candidate, whatever the pool's labels say.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    adapter_id: str = Field(description="the adapter served merged (vLLM's model name)")
    checksum: str | None = Field(
        default=None, description="sha256:<hex> of the merged weights the agent verified"
    )


class ReplicaState(BaseModel):
    """A replica's adapters by tier and its load, as of `timestamp`.

    gpu_adapters is the agent's estimate of vLLM's GPU slots (vLLM does not report them; see
    lorafleet_agent docs). Lists are adapter ids. Rates are over the last 60 s.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    replica_id: str
    gpu_adapters: list[str] = Field(default_factory=list)
    ram_adapters: list[str] = Field(default_factory=list)
    disk_adapters: list[str] = Field(default_factory=list)
    failed_adapters: dict[str, str] = Field(
        default_factory=dict, description="adapter id -> reason it was refused"
    )
    queue_depth: int = Field(default=0, ge=0, description="requests admitted, not yet streaming")
    running_requests: int = Field(default=0, ge=0)
    tokens_in_flight: int = Field(
        default=0, ge=0, description="prompt + max_tokens of requests admitted and unfinished"
    )
    tokens_per_second: dict[str, float] = Field(
        default_factory=dict, description="adapter id -> tokens/s served over the last minute"
    )
    adapters: dict[str, AdapterActivity] = Field(
        default_factory=dict,
        description="adapter id -> its traffic; only adapters active in the last 60 s",
    )
    warming: bool = Field(
        default=False,
        description="the first pre-warm pass of the adapters this replica owns has not ended "
        "(bounded by the agent's prewarm_ready_timeout_s); the gateway routes elsewhere while "
        "another replica can serve",
    )
    engine_ready: bool = Field(
        default=True,
        description="vLLM answers the agent's health checks; false while it is dead or hung "
        "(3 checks timed out in a row): the agent refuses requests with 503, and the gateway "
        "routes elsewhere from its next poll",
    )
    merged: MergedServing | None = Field(
        default=None,
        description="set on a merged pool's replica: it serves only this adapter (listed in "
        "gpu_adapters too), LoRA disabled",
    )
    loads_per_min: float = 0.0
    evictions_per_min: float = 0.0
    timestamp: float = 0.0
