"""What one replica runs, from a ReplicaPool spec: vLLM's LoRA flags and the agent's settings.

One definition for both places that start replicas: the operator's StatefulSet
(`planning.pool`) and standalone mode's local processes (`lorafleet_standalone.processes`).
The environment names are those `lorafleet_agent.settings.AgentSettings` reads; tests on both
sides load AgentSettings from what is produced here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lorafleet_core.api.models import ReplicaPoolSpec
from lorafleet_core.api.names import LABEL_MANAGED_BY, MANAGED_BY_OPERATOR
from lorafleet_core.wire.agent_api import INTERNAL_AUDIENCE

AGENT_ENV_PREFIX = "LORAFLEET_AGENT_"

# The pool's inside secrets, in the Secret `<pool>-internal` (the operator creates the gateway
# pool's when it is missing, `plan_shared_internal_secret`; the chart renders none):
# vLLM's API key (only vLLM and the agent read it), the agents' internal token (the agent and
# the gateway read it) and the agents' data-port token (the agent and the gateway read it; in
# every mode: lorafleet_agent.data_auth says why it is its own shared secret).
VLLM_API_KEY_SECRET_KEY = "vllm-api-key"  # noqa: S105 (a key name, not a secret)
AGENT_TOKEN_SECRET_KEY = "agent-token"  # noqa: S105 (a key name, not a secret)
DATA_TOKEN_SECRET_KEY = "data-token"  # noqa: S105 (a key name, not a secret)


def internal_secret_name(pool_name: str) -> str:
    return f"{pool_name}-internal"


def plan_shared_internal_secret(
    name: str, vllm_api_key: str, agent_token: str, data_token: str
) -> dict[str, Any]:
    """The gateway pool's inside Secret with new tokens, created when it is missing.

    Not owned by the pool: deleting and re-creating the pool must not rotate the tokens the
    gateway and every other pool's agents hold. The tokens come from the caller (randomness is
    I/O).
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY_OPERATOR}},
        "type": "Opaque",
        "stringData": {
            VLLM_API_KEY_SECRET_KEY: vllm_api_key,
            AGENT_TOKEN_SECRET_KEY: agent_token,
            DATA_TOKEN_SECRET_KEY: data_token,
        },
    }


def _from_secret(env_name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": env_name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def vllm_secret_env(pool_name: str) -> list[dict[str, Any]]:
    """vLLM container env: its API key (vLLM reads VLLM_API_KEY as --api-key)."""
    secret = internal_secret_name(pool_name)
    return [_from_secret("VLLM_API_KEY", secret, VLLM_API_KEY_SECRET_KEY)]


@dataclass(frozen=True)
class InsideAuth:
    """How a cluster's agents authenticate their callers, and whether they talk to the API.

    `secret` (the default, and standalone mode): the shared token from the pool's Secret.
    `tokenReview`: the callers' projected ServiceAccount tokens for `audience`, verified by the
    API server; only `callers` (namespace:name: the gateway's and the operator's) pass.
    `service_account`: the agents' own ServiceAccount (the chart gives it `create` on
    tokenreviews and events); with one, the agents also post Events (a record conflict).
    """

    mode: Literal["secret", "tokenReview"] = "secret"
    audience: str = INTERNAL_AUDIENCE
    callers: tuple[str, ...] = ()
    service_account: str | None = None


SECRET_MODE = InsideAuth()  # the default: the pool Secret's shared token, no API access


def _field(env_name: str, path: str) -> dict[str, Any]:
    return {"name": env_name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def agent_secret_env(pool_name: str, inside: InsideAuth = SECRET_MODE) -> list[dict[str, Any]]:
    """Agent container env: vLLM's API key and the data-port token (from the pool's Secret) and
    the internal credential (the Secret's token, or the TokenReview settings), plus what its
    API access needs."""
    secret = internal_secret_name(pool_name)
    p = AGENT_ENV_PREFIX
    env = [
        _from_secret(f"{p}VLLM_API_KEY", secret, VLLM_API_KEY_SECRET_KEY),
        _from_secret(f"{p}DATA_TOKEN", secret, DATA_TOKEN_SECRET_KEY),
    ]
    if inside.mode == "tokenReview":
        env += [
            {"name": f"{p}INTERNAL_AUTH", "value": "tokenReview"},
            {"name": f"{p}INTERNAL_AUDIENCE", "value": inside.audience},
            {"name": f"{p}INTERNAL_SERVICE_ACCOUNTS", "value": ",".join(inside.callers)},
        ]
    else:
        env.append(_from_secret(f"{p}INTERNAL_TOKEN", secret, AGENT_TOKEN_SECRET_KEY))
    if inside.service_account:
        env += [
            {"name": f"{p}KUBE_EVENTS", "value": "true"},
            _field(f"{p}POD_NAMESPACE", "metadata.namespace"),
            _field(f"{p}POD_UID", "metadata.uid"),
        ]
    return env


def cpu_loras(spec: ReplicaPoolSpec) -> int:
    """vLLM --max-cpu-loras: the host-RAM cache, never smaller than the GPU slots.

    vLLM refuses to start when --max-cpu-loras < --max-loras; a pool asking for more GPU slots
    than host-RAM slots gets a RAM cache as large as its GPU slots instead.
    """
    return max(spec.engine.host_ram_slots, spec.engine.gpu_slots)


def lora_flags(spec: ReplicaPoolSpec) -> list[str]:
    """vLLM's multi-LoRA flags: GPU slots, host-RAM cache, rank cap (and context length)."""
    engine = spec.engine
    flags = [
        "--enable-lora",
        "--max-loras",
        str(engine.gpu_slots),
        "--max-cpu-loras",
        str(cpu_loras(spec)),
        "--max-lora-rank",
        str(engine.max_rank),
    ]
    if engine.max_model_len is not None:
        flags += ["--max-model-len", str(engine.max_model_len)]
    return flags


def tool_flags(spec: ReplicaPoolSpec) -> list[str]:
    """vLLM's tool-call flags: with the pool's parser, tool_choice auto, required and a named
    function are served (without, vLLM answers each with a 400 naming the flags)."""
    parser = spec.engine.tool_call_parser
    return [] if parser is None else ["--enable-auto-tool-choice", "--tool-call-parser", parser]


def engine_flags(spec: ReplicaPoolSpec) -> list[str]:
    """vLLM's pool flags: the multi-LoRA flags, or for a merged pool (spec.merged) none of
    them: the adapter is in the weights, LoRA is disabled (only the context length stays);
    then the tool-call flags (both kinds of pool)."""
    if spec.merged is None:
        return lora_flags(spec) + tool_flags(spec)
    max_len = spec.engine.max_model_len
    return ([] if max_len is None else ["--max-model-len", str(max_len)]) + tool_flags(spec)


def merged_model_env(spec: ReplicaPoolSpec, checksum: str, model_dir: str | Path) -> dict[str, str]:
    """The agent's merged-pool settings: which adapter vLLM serves merged, and its weights."""
    assert spec.merged is not None
    p = AGENT_ENV_PREFIX
    return {
        f"{p}MERGED_ADAPTER_ID": spec.merged.adapter,
        f"{p}MERGED_CHECKSUM": checksum,
        f"{p}MERGED_MODEL_DIR": str(model_dir),
    }


def agent_env(
    spec: ReplicaPoolSpec,
    *,
    owned_adapters_file: str | Path,
    cache_dir: str | Path,
    vllm_url: str,
    data_port: int,
    internal_port: int,
    base_model_dir: str | Path | None,
    replica_id: str | None = None,
) -> dict[str, str]:
    """The agent's environment for one replica of the pool.

    `replica_id` None leaves it out (a StatefulSet sets it from the pod name via the downward
    API); `base_model_dir` None leaves shape checks to a model the agent cannot read.
    """
    p = AGENT_ENV_PREFIX
    engine = spec.engine
    env = {
        f"{p}OWNED_ADAPTERS_FILE": str(owned_adapters_file),
        f"{p}CACHE_DIR": str(cache_dir),
        f"{p}CACHE_BYTES": str(max(spec.cache.disk_bytes, 1)),
        f"{p}BASE_MODEL_HASH": spec.base_model.hash,
        f"{p}MAX_RANK": str(engine.max_rank),
        # pydantic-settings reads complex fields (tuples) as JSON.
        f"{p}ALLOWED_TARGET_MODULES": json.dumps(list(engine.allowed_target_modules)),
        f"{p}GPU_SLOTS": str(engine.gpu_slots),
        f"{p}CPU_SLOTS": str(cpu_loras(spec)),
        f"{p}VLLM_URL": vllm_url,
        f"{p}DATA_PORT": str(data_port),
        f"{p}INTERNAL_PORT": str(internal_port),
    }
    if base_model_dir is not None:
        env[f"{p}BASE_MODEL_DIR"] = str(base_model_dir)
    if replica_id is not None:
        env[f"{p}REPLICA_ID"] = replica_id
    return env
