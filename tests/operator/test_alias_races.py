"""Deploys of one alias racing across processes, on a folder and on a cluster (kmock).

Every writer of an AdapterAlias spec (the control API, `lorafleet alias set`) writes only over
the version it read (lorafleet_core.storage.swap): on a cluster it reads again when another got
there first, in a folder it holds the folder's lock from read to write. So each deploy reports
the adapter the alias named right before it: the answers form one chain from "no alias" to
what the alias names at the end, every deploy in it once. Writers here are
two control APIs with stores of their own (their in-process locks know nothing of each other)
and a separate process running the CLI's code, all started together.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from lorafleet_core.api.names import KIND_ALIAS
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_operator.control.store import ControlStore, KubeStore
from lorafleet_standalone import processes
from lorafleet_standalone.local_replicas import free_port
from lorafleet_standalone.state_files import CONTROL_TOKEN_FILE
from lorafleet_standalone.up_status import write_control_token
from tests.gateway.servers import ServerThread
from tests.operator.control_support import AUTH, control_server
from tests.operator.factories import adapter_body, pool_body
from tests.operator.kmock_cluster import Cluster
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)

MODEL = "acme/race:prod"
PER_WRITER = 12
REPO = Path(__file__).resolve().parents[2]
Answer = tuple[str, str | None]  # (adapter deployed, previous adapter reported)


def adapter_names(writer: str) -> list[str]:
    return [f"race-{writer}-{i:02d}" for i in range(PER_WRITER)]


def assert_one_chain(answers: list[Answer], final: str) -> None:
    """Each deploy replaced a different adapter, and following them from "no alias" visits
    every deploy once and ends where the alias ends: nothing overwritten unseen."""
    after: dict[str | None, str] = {}
    for adapter, previous in answers:
        assert previous not in after, f"{after[previous]} and {adapter} both replaced {previous}"
        after[previous] = adapter
    walked: list[str] = []
    at: str | None = None
    while at in after:
        at = after[at]
        walked.append(at)
    assert len(walked) == len(answers), f"the chain holds {len(walked)} of {len(answers)} deploys"
    assert at == final


@contextmanager
def cli_writer(adapters: list[str], *where: str) -> Iterator[subprocess.Popen[str]]:
    """The CLI's deploy loop in its own process (tests/operator/alias_writer.py), ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.operator.alias_writer", MODEL, ",".join(adapters), *where],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=os.environ.copy(),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=20)


def put_all(url: str, auth: dict[str, str], adapters: list[str], out: list[Answer]) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        for adapter in adapters:
            resp = client.put(
                f"/internal/aliases/{MODEL}", json={"adapter_id": adapter}, headers=auth
            )
            assert resp.status_code == 200, resp.text
            out.append((adapter, resp.json()["previous_adapter_id"]))


def race(apis: list[tuple[str, dict[str, str]]], cli: subprocess.Popen[str]) -> list[Answer]:
    """Start the control APIs' writers and the CLI's together; every answer, once all are done."""
    answers: list[list[Answer]] = [[] for _ in apis]
    threads = [
        threading.Thread(target=put_all, args=(url, auth, adapter_names(f"api{i}"), answers[i]))
        for i, (url, auth) in enumerate(apis)
    ]
    for t in threads:
        t.start()
    assert cli.stdin is not None
    assert cli.stdout is not None
    cli.stdin.write("go\n")
    cli.stdin.flush()
    cli_lines = cli.stdout.read().splitlines()
    for t in threads:
        t.join(120)
    assert cli.wait(timeout=20) == 0
    from_cli = [json.loads(line) for line in cli_lines]
    everything = [a for some in answers for a in some]
    everything += [(x["adapter"], x["previous"]) for x in from_cli]
    assert len(everything) == PER_WRITER * (len(apis) + 1), "a writer failed; see its output"
    return everything


# ---------------------------------------------------------------------------------- a folder


def _folder_with_adapters(folder: Path, writers: list[str]) -> None:
    pool = pool_body("pool")
    del pool["metadata"]["namespace"]
    write_object(folder, pool)
    for writer in writers:
        for name in adapter_names(writer):
            body = adapter_body(name)
            del body["metadata"]["namespace"]
            write_object(folder, body)


@contextmanager
def control_process(tmp_path: Path, manifests: Path, name: str, digest: str) -> Iterator[str]:
    """The control API as `lorafleet up` starts it, in its own process, serving `manifests`."""
    logs = tmp_path / name
    logs.mkdir()
    replicas = tmp_path / "replicas.json"
    replicas.write_text(json.dumps({"replicas": []}))
    port = free_port()
    spec = processes.control_process(
        manifests_dir=manifests,
        replicas_file=replicas,
        port=port,
        token_sha256=digest,
        log_dir=logs,
    )
    with open(logs / "control.log", "wb") as log:
        proc = subprocess.Popen(
            list(spec.argv), env={**os.environ, **spec.env}, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        health = spec.health_url
        assert health is not None
        eventually(
            lambda: httpx.get(health, timeout=2).status_code == 200,
            within_s=60,
            ignore=(httpx.HTTPError,),
            abort=lambda: None if proc.poll() is None else f"exited {proc.returncode}",
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def test_two_control_api_processes_and_the_cli_racing_on_a_folder_report_one_chain(
    tmp_path: Path,
):
    manifests = tmp_path / "manifests"
    _folder_with_adapters(manifests, ["api0", "api1", "cli"])
    digest = write_control_token(tmp_path)
    auth = {"authorization": f"Bearer {(tmp_path / CONTROL_TOKEN_FILE).read_text().strip()}"}
    with ExitStack() as stack:
        urls = [
            stack.enter_context(control_process(tmp_path, manifests, f"c{i}", digest))
            for i in (0, 1)
        ]
        cli = stack.enter_context(cli_writer(adapter_names("cli"), "--folder", str(manifests)))
        answers = race([(u, auth) for u in urls], cli)
    (alias,) = load_folder(manifests).of_kind(KIND_ALIAS)
    assert_one_chain(answers, alias.body["spec"]["adapter"])


# --------------------------------------------------------------------------------- a cluster


class LazyApi:
    """A kubernetes_asyncio client made on first use, in the loop of the server using it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.made: ApiClient | None = None

    async def __call__(self) -> ApiClient:
        if self.made is None:
            self.made = ApiClient(Configuration(host=self.url))
        return self.made

    def close_in(self, server: ServerThread) -> None:
        if self.made is not None and server.loop is not None:
            asyncio.run_coroutine_threadsafe(self.made.close(), server.loop).result(10)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster("race")
    try:
        yield c
    finally:
        c.close()


def test_two_control_apis_and_the_cli_racing_on_a_cluster_report_one_chain(cluster: Cluster):
    """Each control API has its own client and store, as two operator replicas do; the API
    server (kmock, honouring resourceVersion preconditions as it does) refuses stale writes."""
    cluster.create(cluster.path("replicapools"), _without_namespace(pool_body("pool")))
    for writer in ("api0", "api1", "cli"):
        for name in adapter_names(writer):
            cluster.create(cluster.path("loraadapters"), _without_namespace(adapter_body(name)))
    apis = [LazyApi(cluster.url) for _ in (0, 1)]
    stores: list[ControlStore] = [KubeStore(api, "race") for api in apis]
    with ExitStack() as stack:
        servers = [stack.enter_context(control_server(store)) for store in stores]
        for api, server in zip(apis, servers, strict=True):
            stack.callback(api.close_in, server)  # before its server stops
        urls = [server.url for server in servers]
        cli = stack.enter_context(
            cli_writer(adapter_names("cli"), "--cluster", cluster.url, "race")
        )
        answers = race([(u, AUTH) for u in urls], cli)
    (alias,) = cluster.items(cluster.path("adapteraliases"))
    assert_one_chain(answers, alias["spec"]["adapter"])


def _without_namespace(body: dict[str, Any]) -> dict[str, Any]:
    del body["metadata"]["namespace"]
    return body
