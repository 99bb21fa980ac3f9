"""What a replica reports at GET /internal/replicas/{id}/state (gateway and operator read it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ReplicaState(BaseModel):
    """A replica's adapters by tier and its load, as of `timestamp`.

    gpu_adapters is the agent's estimate of vLLM's GPU slots (vLLM does not report them; see
    lorafleet_agent docs). Lists are adapter ids. Rates are over the last 60 s.
    """

    model_config = ConfigDict(extra="ignore")

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
    loads_per_min: float = 0.0
    evictions_per_min: float = 0.0
    timestamp: float = 0.0
