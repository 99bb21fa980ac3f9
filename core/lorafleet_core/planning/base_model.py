"""What a ReplicaPool's `spec.baseModel.uri` names, and how vLLM is given it (pure).

One reading for every place that starts a replica or opens the base model: the operator's
StatefulSet (`planning.pool`) and merge Job (`planning.merge_job`), `lorafleet adapter push`
(`lorafleet_cli.cmd_adapter`) and standalone `lorafleet up` (`lorafleet_standalone`). Before,
the operator handed the uri to vLLM verbatim while the CLI and standalone stripped `file://`,
so a pool on `file:///models/x` ran `--model file:///models/x`, which vLLM takes for a hub id.

- `file:///p` and `/p`: a folder on the replica (in the image or on a mounted volume);
- `s3://bucket/prefix/`: an object store prefix, streamed by vLLM's Run:ai model streamer
  (`--load-format runai_streamer`), which reads the AWS SDK's variables, not the agent's
  `LORAFLEET_AGENT_S3_*` (see `object_store_env`);
- anything else (a Hugging Face id such as `org/model`): given to vLLM as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlparse

OBJECT_STORE_SCHEMES = ("s3",)
# vLLM's loader for object store URIs (vllm.model_executor.model_loader.runai_streamer_loader).
STREAMER_LOAD_FORMAT = "runai_streamer"


class BaseModelKind(StrEnum):
    LOCAL = "local"  # a folder on the replica
    OBJECT_STORE = "objectStore"  # an s3:// prefix
    HUB = "hub"  # anything else, vLLM's to resolve (a Hugging Face id)


@dataclass(frozen=True)
class BaseModelSource:
    kind: BaseModelKind
    location: str  # the folder (LOCAL), else the uri as written

    @property
    def local_dir(self) -> str | None:
        """The folder when the model is on the replica's disk, else None."""
        return self.location if self.kind is BaseModelKind.LOCAL else None


def base_model_source(uri: str) -> BaseModelSource:
    """What `uri` (a ReplicaPool's spec.baseModel.uri) names."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        # file://localhost/p is /p too (RFC 8089); another host has no meaning on a replica.
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            return BaseModelSource(BaseModelKind.HUB, uri)
        return BaseModelSource(BaseModelKind.LOCAL, unquote(parsed.path))
    if uri.startswith("/"):
        return BaseModelSource(BaseModelKind.LOCAL, uri)
    if parsed.scheme in OBJECT_STORE_SCHEMES:
        return BaseModelSource(BaseModelKind.OBJECT_STORE, uri)
    return BaseModelSource(BaseModelKind.HUB, uri)


def model_args(source: BaseModelSource) -> list[str]:
    """vLLM's `--model` (and for an object store its loader) for the base model."""
    args = ["--model", source.location]
    if source.kind is BaseModelKind.OBJECT_STORE:
        args += ["--load-format", STREAMER_LOAD_FORMAT]
    return args


# The agent's object store settings (lorafleet_agent.settings, which the pool's template env
# sets for both containers) and the names the Run:ai streamer's S3 client reads for the same.
AGENT_TO_AWS_ENV = {
    "LORAFLEET_AGENT_S3_ENDPOINT_URL": "AWS_ENDPOINT_URL",
    "LORAFLEET_AGENT_S3_REGION": "AWS_DEFAULT_REGION",
    "LORAFLEET_AGENT_S3_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
    "LORAFLEET_AGENT_S3_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
}
# The streamer addresses buckets as <bucket>.<endpoint> unless told otherwise; an S3-compatible
# store (MinIO) at its own endpoint serves <endpoint>/<bucket>, as the agent's boto3 reaches it.
PATH_STYLE_ENV = {"name": "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "value": "0"}


def object_store_env(
    source: BaseModelSource, template_env: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The vLLM container's env for streaming an object store base model.

    Each `LORAFLEET_AGENT_S3_*` entry of the pool's template env is repeated under the AWS name
    the streamer reads (its value or valueFrom as it is), unless the template sets that name
    itself; with an endpoint, path-style addressing. Keys that arrive through `envFrom` cannot
    be seen here: such a Secret carries the AWS names for vLLM (docs/reference/operator.md).
    """
    if source.kind is not BaseModelKind.OBJECT_STORE:
        return []
    named = {e.get("name"): e for e in template_env}
    env: list[dict[str, Any]] = []
    for ours, aws in AGENT_TO_AWS_ENV.items():
        entry = named.get(ours)
        if entry is None or aws in named:
            continue
        env.append({**entry, "name": aws})
    endpoint = "AWS_ENDPOINT_URL" in named or "LORAFLEET_AGENT_S3_ENDPOINT_URL" in named
    if endpoint and PATH_STYLE_ENV["name"] not in named:
        env.append(dict(PATH_STYLE_ENV))
    return env
