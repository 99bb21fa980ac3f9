"""What one `lorafleet up` runs with: its command line (UpOptions) and its settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lorafleet_core.planning.adapters import REPLICA_TOKENS_PER_SECOND
from lorafleet_core.planning.base_model import base_model_source
from lorafleet_standalone.guards import UpError


class StandaloneSettings(BaseSettings):
    """Knobs of `lorafleet up` beyond its command line (env prefix `LORAFLEET_UP_`)."""

    model_config = SettingsConfigDict(env_prefix="LORAFLEET_UP_", extra="ignore")

    poll_interval_s: float = Field(
        default=1.0, description="how often the children and the manifests folder are checked"
    )
    replan_s: float = Field(
        default=10.0, description="re-plan owners from the replicas' traffic this often"
    )
    max_restarts: int = Field(
        default=3, description="restarts of a crashed child before `up` gives up"
    )
    stable_s: float = Field(
        default=300.0, description="a child up this long gets its whole restart budget back"
    )
    restart_backoff_s: float = Field(default=1.0, description="wait before a restart")
    stop_timeout_s: float = Field(
        default=20.0, description="on stop, how long a child may take before it is killed"
    )
    replica_tokens_per_second: float = Field(
        default=REPLICA_TOKENS_PER_SECOND,
        description="generated tokens/s one replica serves (the operator's setting): sizes "
        "owner counts and the merged-pool threshold (autoMerge), as on a cluster",
    )


@dataclass(frozen=True)
class UpOptions:
    state_dir: Path
    manifests_dir: Path
    replicas: int | None  # None: the pool's replicas.desired, else replicas.min (at least 1)
    port: int
    internal_port: int
    model: Path | None
    pool: str | None
    banner: str | None = None  # printed when everything is ready (demo usage)
    control_port: int | None = None  # the control API's port (None: any free one)


def model_dir_of(uri: str) -> Path:
    local = base_model_source(uri).local_dir
    if local is None:
        raise UpError(
            f"the pool's baseModel.uri {uri} is not local; pass --model DIR with the model files"
        )
    return Path(local)
