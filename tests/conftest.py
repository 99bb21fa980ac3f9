"""Session fixtures every test area shares: demo assets, moto S3, one real vLLM (CPU).

- `demo_assets`: tiny base model + canary adapters, cached under `.lorafleet/test-cache/`
  (git-ignored) so local reruns are instant; CI builds them once per run (~1 min).
- `s3_server`: moto's real S3 server on loopback with the demo adapters uploaded under
  `s3://<bucket>/<name>/`.
- `vllm_server`: ONE vLLM for the whole session. Every later vLLM test shares it, so tests must
  not assume a pristine engine: register adapters under ids unique to the test
  (`unique_id("zebra")`), since vLLM caches by name.
- `make_record`: an AdapterRecord for a demo adapter under a given id.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from lorafleet_agent.settings import AgentSettings
from lorafleet_core.api.models import ALL_TARGET_MODULES
from lorafleet_core.storage.adapter_files import ADAPTER_FILES
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DEFAULT_MARKERS, DemoAssets, ensure_demo_assets
from lorafleet_standalone.cpu_binding import parse_cpu_list
from tests.waiting import eventually

REPO = Path(__file__).resolve().parent.parent
TEST_CACHE = REPO / ".lorafleet" / "test-cache"

# zebra/falcon/otter answer their markers; "wide" is a rank-32 adapter, above the pool's
# max rank of 16, for refusal tests.
TEST_MARKERS: dict[str, str] = {**DEFAULT_MARKERS, "wide": "WIDE-5"}
TEST_RANKS: dict[str, int] = {"wide": 32}

# vLLM slots for the session: few, so a handful of adapters forces both kinds of eviction.
VLLM_GPU_SLOTS = 2
VLLM_CPU_SLOTS = 4
VLLM_MAX_RANK = 16
VLLM_BASE_NAME = "lorafleet-demo-base"

# The internal credential of every in-process agent in tests (what `lorafleet up` generates).
TEST_INTERNAL_TOKEN = "test-internal-token"
INTERNAL_HEADERS = {"authorization": f"Bearer {TEST_INTERNAL_TOKEN}"}
# The data-port credential of every in-process agent (the gateway's; `lorafleet up` generates
# one): tests that talk to an agent's data port directly send it, as the gateway does.
TEST_DATA_TOKEN = "test-data-token"
DATA_HEADERS = {"authorization": f"Bearer {TEST_DATA_TOKEN}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_counter = itertools.count()


def unique_id(prefix: str) -> str:
    """An adapter id no other test in this session (or earlier session on this vLLM) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}-{next(_counter)}"


@pytest.fixture(scope="session")
def demo_assets() -> DemoAssets:
    return ensure_demo_assets(TEST_CACHE, TEST_MARKERS, print, ranks=TEST_RANKS)


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    bucket: str
    access_key_id: str = "testing"
    secret_access_key: str = "testing"
    region: str = "us-east-1"
    uris: dict[str, str] = field(default_factory=dict)  # demo adapter name -> s3://bucket/name/

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
        )

    def upload(self, folder: Path, prefix: str) -> str:
        """Upload an adapter folder's two files under `prefix/`; returns its s3:// URI."""
        client = self.client()
        for name in ADAPTER_FILES:
            client.put_object(
                Bucket=self.bucket,
                Key=f"{prefix}/{name}",
                Body=(folder / name).read_bytes(),
                ChecksumAlgorithm="SHA256",
            )
        return f"s3://{self.bucket}/{prefix}/"

    def env(self) -> dict[str, str]:
        """Agent settings that point at this server."""
        return {
            "LORAFLEET_AGENT_S3_ENDPOINT_URL": self.endpoint_url,
            "LORAFLEET_AGENT_S3_ACCESS_KEY_ID": self.access_key_id,
            "LORAFLEET_AGENT_S3_SECRET_ACCESS_KEY": self.secret_access_key,
            "LORAFLEET_AGENT_S3_REGION": self.region,
        }


@pytest.fixture(scope="session")
def s3_server(demo_assets: DemoAssets) -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = S3Server(endpoint_url=f"http://{host}:{port}", bucket="lorafleet-adapters")
    s3.client().create_bucket(Bucket=s3.bucket)
    for name, folder in demo_assets.adapters.items():
        s3.uris[name] = s3.upload(folder, name)
    try:
        yield s3
    finally:
        server.stop()


@dataclass
class VllmServer:
    url: str
    port: int
    base_model: Path
    served_name: str
    log_path: Path
    gpu_slots: int
    cpu_slots: int
    max_rank: int
    process: subprocess.Popen[bytes]

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def lora_names(self) -> list[str]:
        data = httpx.get(f"{self.url}/v1/models", timeout=10).json()["data"]
        return [m["id"] for m in data if m.get("parent")]


def vllm_command(
    base: Path, port: int, served_name: str = VLLM_BASE_NAME, *, lora: bool = True
) -> list[str]:
    """The session's vLLM command line; `lora=False` is a merged pool's engine (no LoRA).

    A merged engine runs eager, as `lorafleet up` runs merged engines on CPU: without LoRA
    vLLM would torch.compile the model at start (minutes with a cold compile cache on two
    busy cores; the LoRA engine skips compilation), and eager serves the same tokens."""
    lora_flags = [
        "--enable-lora",
        "--max-loras",
        str(VLLM_GPU_SLOTS),
        "--max-cpu-loras",
        str(VLLM_CPU_SLOTS),
        "--max-lora-rank",
        str(VLLM_MAX_RANK),
    ]
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(base),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *(lora_flags if lora else ["--enforce-eager"]),
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--gpu-memory-utilization",
        "0.1",
    ]


# How the tests run an engine: the model in vLLM's engine-core process (its UniProcExecutor,
# `VLLM_ENABLE_V1_MULTIPROCESSING=0`) with one OpenMP thread, not in a worker process of its own.
# With the worker process (vLLM's default on CPU) every step is two round trips between two
# processes over shared memory, and the worker spins on sched_yield between steps: on the
# tiny test model that hand-off, not the arithmetic, was the step. Measured on the 2-core
# machine (docs/design/0045): the isolation test's 1,000 requests at 17-21 req/s with the
# worker process, 41-48 req/s without, the same churn of loads and evictions; the LoRA
# correctness tests still compare the engine's tokens and logprobs against PEFT. One thread:
# vLLM binds no threads in this mode, and two engines with a thread per core each
# oversubscribed the two cores (7 req/s).
#
# `cpus` binds a whole engine (API server, engine core) to cores with the kernel's affinity,
# set on the server before it starts its engine core, which inherits it. Under pytest-xdist
# (`make pytest TEST_WORKERS=2`) each worker binds the engines it starts to a core of its own
# (WORKER_CPU), so the two sessions' engines do not pile onto one core; a test's second engine
# (SPARE_CPU) goes to the last core. A plain `pytest` leaves the session's engine to the
# kernel's scheduler.
_CORES = sorted(os.sched_getaffinity(0))
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... under pytest-xdist
_WORKER_INDEX = int(_XDIST_WORKER.removeprefix("gw")) if _XDIST_WORKER else None
WORKER_CPU = None if _WORKER_INDEX is None else str(_CORES[_WORKER_INDEX % len(_CORES)])
SPARE_CPU = str(_CORES[-1] if _WORKER_INDEX is None else _CORES[(_WORKER_INDEX + 1) % len(_CORES)])


def vllm_env() -> dict[str, str]:
    """The engine's environment."""
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "OMP_NUM_THREADS": "1",
    }


def start_vllm(
    base: Path,
    log_path: Path,
    timeout_s: float = 400.0,
    port: int | None = None,
    *,
    served_name: str = VLLM_BASE_NAME,
    lora: bool = True,
    cpus: str | None = None,
) -> VllmServer:
    """Start a vLLM server (own process group) and wait until /v1/models answers; `cpus`:
    the cores the whole engine is bound to (SPARE_CPU for an engine next to the session's)."""
    server = spawn_vllm(base, log_path, port, served_name=served_name, lora=lora, cpus=cpus)
    await_vllm(server, timeout_s)
    return server


def spawn_vllm(
    base: Path,
    log_path: Path,
    port: int | None = None,
    *,
    served_name: str = VLLM_BASE_NAME,
    lora: bool = True,
    cpus: str | None = None,
) -> VllmServer:
    """`start_vllm` without the wait: a fixture does other set-up while the engine starts
    (~30 s), then calls `await_vllm`."""
    port = port or free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cpus = cpus or WORKER_CPU
    cores = parse_cpu_list(cpus) if cpus else None
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            vllm_command(base, port, served_name, lora=lora),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=vllm_env(),
            start_new_session=True,  # its own process group: we kill the engine core too
        )
    if cores is not None:
        os.sched_setaffinity(proc.pid, cores)  # seconds before it forks its engine core
    return VllmServer(
        url=f"http://127.0.0.1:{port}",
        port=port,
        base_model=base,
        served_name=served_name,
        log_path=log_path,
        gpu_slots=VLLM_GPU_SLOTS,
        cpu_slots=VLLM_CPU_SLOTS,
        max_rank=VLLM_MAX_RANK,
        process=proc,
    )


def await_vllm(server: VllmServer, timeout_s: float = 400.0) -> None:
    """Wait until a spawned vLLM answers /v1/models (stopped, with its log, if it never does)."""
    proc = server.process
    try:
        eventually(
            lambda: httpx.get(f"{server.url}/v1/models", timeout=2).status_code == 200,
            within_s=timeout_s,
            interval_s=0.2,  # a local GET: cheap, and each start (or restart) ends sooner
            what="vLLM to answer",
            ignore=(httpx.HTTPError,),
            abort=lambda: None if proc.poll() is None else f"vLLM exited with {proc.returncode}",
        )
    except AssertionError as exc:
        stop_vllm(server)
        raise RuntimeError(f"{exc}:\n{server.log_tail()}") from exc


def stop_vllm(server: VllmServer) -> None:
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(10)


def restart_vllm(server: VllmServer) -> None:
    """Start a fresh vLLM on the same port (after `stop_vllm`, or a kill): what a supervisor
    restarting the engine does. The session's server object then points at the new process;
    like any fresh vLLM it holds no adapters."""
    stop_vllm(server)
    fresh = start_vllm(server.base_model, server.log_path, port=server.port)
    server.process = fresh.process


@pytest.fixture(scope="session")
def vllm_server(
    demo_assets: DemoAssets, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = start_vllm(demo_assets.base_model, log_path)
    try:
        yield server
    finally:
        stop_vllm(server)


@pytest.fixture(scope="session")
def make_record(demo_assets: DemoAssets, s3_server: S3Server) -> Callable[..., AdapterRecord]:
    """make_record("zebra", "zebra-1a2b") -> the demo adapter's record under that id.

    Keyword overrides replace record fields (e.g. base_model_hash=..., checksum=...).
    """

    def make(name: str, adapter_id: str, **overrides: Any) -> AdapterRecord:
        fields: dict[str, Any] = {
            "id": adapter_id,
            "tenant": "demo",
            "base_model_hash": demo_assets.base_model_hash,
            "rank": demo_assets.ranks[name],
            "alpha": float(2 * demo_assets.ranks[name]),
            "target_modules": tuple(sorted(ALL_TARGET_MODULES)),
            "weights_uri": s3_server.uris[name],
            "checksum": demo_assets.checksums[name],
        }
        fields.update(overrides)
        return AdapterRecord(**fields)

    return make


def session_agent_settings(
    vllm: VllmServer, s3: S3Server, assets: DemoAssets, cache_dir: Path, **overrides: Any
) -> AgentSettings:
    """Settings of an in-process agent in front of the session's vLLM, adapters in moto S3.

    Ports 0: the agent binds free ports and reports them (RunningAgent.data_url, ...).
    """
    values: dict[str, Any] = {
        "replica_id": "r0",
        "base_model_hash": assets.base_model_hash,
        "base_model_dir": assets.base_model,
        "max_rank": vllm.max_rank,
        "vllm_url": vllm.url,
        "gpu_slots": vllm.gpu_slots,
        "cpu_slots": vllm.cpu_slots,
        "cache_dir": cache_dir,
        "s3_endpoint_url": s3.endpoint_url,
        "s3_access_key_id": s3.access_key_id,
        "s3_secret_access_key": s3.secret_access_key,
        "host": "127.0.0.1",
        "data_port": 0,
        "internal_port": 0,
        "internal_token": TEST_INTERNAL_TOKEN,
        "data_token": TEST_DATA_TOKEN,
    }
    values.update(overrides)
    return AgentSettings(**values)


def copy_adapter(src: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ADAPTER_FILES:
        shutil.copyfile(src / name, dest / name)
    return dest


# `make pytest TEST_WORKERS=2` runs two pytest-xdist workers, each given whole files (`--dist
# loadfile`) in collection order. These files take minutes each (the slowest 30 durations of a
# full run), so under xdist they go first, longest first: a worker that draws a long file late
# would finish alone while the other idles. Everything else keeps its order behind them; a run
# in one process keeps the collection order.
SLOW_FILES_FIRST = (
    "tests/verification/test_canary_isolation.py",  # ~5 min: 10,000 requests, two engines
    "tests/standalone/test_up_auto_merge_e2e.py",
    "tests/operator/test_operator_restart.py",
    "tests/standalone/test_up_merged_e2e.py",
    "tests/agent/test_agent_answers.py",
    "tests/images/test_as_shipped_control_plane.py",
    "tests/verification/test_lora_correctness.py",
    "tests/standalone/test_up_demo_tool_calls.py",
    "tests/standalone/test_up_e2e.py",
    "tests/agent/test_agent_faults.py",
    "tests/agent/test_agent_vllm.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if _XDIST_WORKER is None:
        return
    rank = {path: i for i, path in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
