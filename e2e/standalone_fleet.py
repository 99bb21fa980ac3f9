"""`--start`: a throwaway `lorafleet up` sized so that adapter tiers matter, stopped cleanly.

Prepares a temporary state folder with the demo (base model + the three canaries, reused from
the shared asset cache), shrinks the pool's engine (`gpuSlots`/`hostRamSlots` become vLLM's
`--max-loras`/`--max-cpu-loras`), pushes `copies` extra versions of each canary with
`lorafleet adapter push` and gives each its own alias with `lorafleet alias set`
(`demo/zebra-2:prod` -> `demo-zebra-v2`, which still answers `ZEBRA-7`), raises the demo
tenant's rate limits so the gateway measures the fleet rather than the limiter, then runs
`lorafleet up --manifests ...` as a child process group and waits for it to be ready.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class FleetOptions:
    replicas: int = 1
    gpu_slots: int = 2
    host_ram_slots: int = 4
    copies: int = 3  # extra versions (and aliases) per demo canary
    owners_per_adapter: int | None = None  # None: the pool's default
    ready_timeout_s: float = 600.0
    keep_state: bool = False


@dataclass(frozen=True)
class RunningFleet:
    state_dir: Path
    base_url: str
    api_key: str
    aliases: list[str]  # hottest first: the demo aliases, then the copies
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def manifests(self) -> Path:
        return self.state_dir / "manifests"


def default_assets() -> Path:
    """The shared demo asset cache: reuse whatever `make demo` or the tests already built."""
    env = os.environ.get("LORAFLEET_DEMO_ASSETS")
    if env:
        return Path(env)
    for candidate in (REPO / ".lorafleet" / "demo-assets", REPO / ".lorafleet" / "test-cache"):
        if candidate.is_dir():
            return candidate
    return REPO / ".lorafleet" / "demo-assets"


def prepare(state: Path, opts: FleetOptions) -> tuple[str, list[str]]:
    """Write the demo + copies into `state`; returns (api key, aliases)."""
    from lorafleet_cli.main import main as cli
    from lorafleet_core.api.apikeys import TenantKeys, hash_key
    from lorafleet_core.storage.manifests import write_object
    from lorafleet_standalone import demo

    manifests = state / "manifests"
    setup = demo.prepare_demo(state, manifests, replicas=opts.replicas, progress=False)
    pool_file = manifests / "replicapool-demo.yaml"
    pool: dict[str, Any] = yaml.safe_load(pool_file.read_text())
    pool["spec"]["engine"]["gpuSlots"] = opts.gpu_slots
    pool["spec"]["engine"]["hostRamSlots"] = opts.host_ram_slots
    pool["spec"]["replicas"] = {"min": 1, "max": opts.replicas, "desired": opts.replicas}
    if opts.owners_per_adapter is not None:
        pool["spec"]["ownersPerAdapter"] = opts.owners_per_adapter
    write_object(manifests, pool)
    # A load test measures the fleet: lift the demo tenant's rate limits (and its cap on
    # requests at once, 64 per gateway by default) well above it.
    keys = TenantKeys(
        tenant=demo.DEMO_TENANT,
        key_hashes=(hash_key(setup.api_key),),
        requests_per_second=10_000,
        tokens_per_minute=100_000_000,
        max_concurrent_requests=100_000,
    )
    write_object(manifests, keys.to_secret())
    aliases = sorted(setup.models)
    target = ["--manifests", str(manifests), "--state-dir", str(state)]
    chatter = io.StringIO()  # the CLI's output, shown only when a step fails
    with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
        for copy in range(2, opts.copies + 2):
            for name in ("zebra", "falcon", "otter"):
                src = state / "objectstore" / demo.DEMO_TENANT / name / demo.DEMO_VERSION
                version = f"v{copy}"
                rc = cli(["adapter", "push", str(src), "--tenant", demo.DEMO_TENANT,
                          "--name", name, "--version", version, "--pool", demo.DEMO_POOL,
                          "--quiet", *target])  # fmt: skip
                if rc != 0:
                    raise RuntimeError(
                        f"adapter push {name} {version} failed:\n{chatter.getvalue()}"
                    )
                alias = f"{demo.DEMO_TENANT}/{name}-{copy}:prod"
                rc = cli(["alias", "set", alias, f"{demo.DEMO_TENANT}-{name}-{version}", *target])
                if rc != 0:
                    raise RuntimeError(f"alias set {alias} failed:\n{chatter.getvalue()}")
                aliases.append(alias)
    return setup.api_key, aliases


def _status(state: Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads((state / "up.json").read_text())
        return doc
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def started_fleet(opts: FleetOptions) -> Iterator[RunningFleet]:
    state = Path(tempfile.mkdtemp(prefix="lorafleet-loadtest-"))
    os.environ["LORAFLEET_DEMO_ASSETS"] = str(default_assets())
    print(f"[loadtest] preparing {state} (demo assets: {default_assets()})", file=sys.stderr)
    api_key, aliases = prepare(state, opts)
    log = state / "up.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lorafleet_cli.main", "up", "--manifests",
             str(state / "manifests"), "--state-dir", str(state), "--replicas",
             str(opts.replicas), "--port", "0", "--internal-port", "0", "--quiet"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        print(f"[loadtest] lorafleet up started (pid {proc.pid}, log {log})", file=sys.stderr)
        deadline = time.monotonic() + opts.ready_timeout_s
        while _status(state).get("phase") != "ready":
            if proc.poll() is not None:
                raise RuntimeError(f"lorafleet up exited ({proc.returncode}); see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"lorafleet up not ready after {opts.ready_timeout_s:.0f}s")
            time.sleep(0.5)
        url = _status(state)["gateway"]["url"]
        print(f"[loadtest] ready at {url} with {len(aliases)} aliases", file=sys.stderr)
        yield RunningFleet(state, f"{url}/v1", api_key, aliases, proc, log)
    finally:
        leftovers = stop(proc, state)
        if leftovers:
            print(f"[loadtest] WARNING: processes left: {leftovers}", file=sys.stderr)
        if not opts.keep_state and not leftovers:
            import shutil

            shutil.rmtree(state, ignore_errors=True)
        else:
            print(f"[loadtest] state kept in {state}", file=sys.stderr)


def stop(proc: subprocess.Popen[bytes], state: Path) -> dict[int, list[int]]:
    """SIGINT (what Ctrl-C sends) and wait; SIGKILL the group if it hangs. Returns leftovers."""
    from lorafleet_standalone.supervisor import group_members

    children = [int(p["pid"]) for p in _status(state).get("processes", {}).values()]
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    # Each child of `up` leads its own process group; none of them may survive it.
    leftovers = {pid: m for pid in [proc.pid, *children] if (m := group_members(pid))}
    for pgid in leftovers:  # reported by the caller; never leave them running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    return leftovers


@contextlib.contextmanager
def started_base_engine(fleet: RunningFleet) -> Iterator[str]:
    """A second vLLM with the pool's own command line (standalone.processes.vllm_process) and no
    API key, for the overhead run's base-model row: the fleet's engines take a key only their
    agents hold, so the base model is measured on this twin. Yields its URL; stopped at the end.
    """
    from lorafleet_core.api.models import ReplicaPoolSpec
    from lorafleet_standalone.local_replicas import free_port
    from lorafleet_standalone.processes import ReplicaPlan, is_cpu_build, vllm_process
    from lorafleet_standalone.up_options import model_dir_of

    doc = yaml.safe_load((fleet.manifests / "replicapool-demo.yaml").read_text())
    pool = ReplicaPoolSpec.model_validate(doc["spec"])
    home = fleet.state_dir / "base-engine"
    plan = ReplicaPlan("base-engine", free_port(), free_port(), free_port(), home)
    spec = vllm_process(plan, model_dir_of(pool.base_model.uri), pool, cpu=is_cpu_build(),
                        log_dir=fleet.state_dir)  # fmt: skip
    assert spec.log_file is not None
    with spec.log_file.open("wb") as out:
        proc = subprocess.Popen(
            list(spec.argv), stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, **spec.env}, start_new_session=True,
        )  # fmt: skip
    try:
        import httpx

        deadline = time.monotonic() + spec.start_timeout_s
        while True:
            try:
                if httpx.get(f"{plan.vllm_url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"base engine did not start; see {spec.log_file}")
            time.sleep(1.0)
        # The fleet's adapters too, under the names the agents give them (their ids), so that
        # `--engine-direct` can send the adapter rows to this engine.
        from urllib.parse import urlparse

        from lorafleet_core.storage.manifests import load_folder

        adapters = load_folder(fleet.manifests).of_kind("LoRAAdapter")
        for obj in adapters:
            path = urlparse(obj.body["spec"]["weightsUri"]).path
            body = {"lora_name": obj.name, "lora_path": path}
            r = httpx.post(f"{plan.vllm_url}/v1/load_lora_adapter", json=body, timeout=60)
            if r.status_code != 200:
                raise RuntimeError(f"base engine refused {body['lora_name']}: {r.text[:200]}")
        print(
            f"[loadtest] base engine ready at {plan.vllm_url} with {len(adapters)} adapters",
            file=sys.stderr,
        )
        yield plan.vllm_url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
