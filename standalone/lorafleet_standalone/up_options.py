"""What one `lorafleet up` runs with: its command line (UpOptions) and its settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pydantic_settings import BaseSettings, SettingsConfigDict

from lorafleet_core.planning.adapters import REPLICA_TOKENS_PER_SECOND
from lorafleet_standalone.guards import UpError


class StandaloneSettings(BaseSettings):
    """Knobs of `lorafleet up` beyond its command line (env prefix `LORAFLEET_UP_`)."""

    model_config = SettingsConfigDict(env_prefix="LORAFLEET_UP_", extra="ignore")

    poll_interval_s: float = 1.0
    replan_s: float = 10.0  # re-plan owners from the replicas' traffic this often
    max_restarts: int = 3
    stable_s: float = 300.0  # a child up this long gets its whole restart budget back
    restart_backoff_s: float = 1.0
    stop_timeout_s: float = 20.0
    # Generated tokens/s one replica serves (the operator's REPLICA_TOKENS_PER_SECOND): sizes
    # owner counts and the merged-pool threshold (autoMerge), as on a cluster.
    replica_tokens_per_second: float = REPLICA_TOKENS_PER_SECOND


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
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise UpError(
            f"the pool's baseModel.uri {uri} is not local; pass --model DIR with the model files"
        )
    return Path(parsed.path)
