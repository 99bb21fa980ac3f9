"""`python -m lorafleet_gateway` as a process, configured only by LORAFLEET_GATEWAY_* variables."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType

import httpx
import openai
import uvicorn

from lorafleet_core.wire.metric_names import (
    GATEWAY_TENANT_REQUESTS,
    GATEWAY_TENANT_TTFT_OVER_TARGET,
)
from lorafleet_gateway.__main__ import _Server
from lorafleet_gateway.metrics import TenantSLO
from lorafleet_gateway.reqlog import BatchingHandler
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.settings import GatewaySettings
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, MSG_DEFAULT, default_aliases
from tests.gateway.fake_replica import FakeReplica
from tests.gateway.servers import ServerThread, bound_socket
from tests.log_lines import json_lines
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with bound_socket() as s:
        port: int = s.getsockname()[1]
        return port


def test_gateway_process_serves_and_logs_json(tmp_path: Path):
    """Every line the process writes is one JSON object in the shared format: the request line
    (with its request id, tenant, adapter and replica), and the warning of a module logger
    (a manifest it cannot read), which used to come out as plain text."""
    replica = FakeReplica("replica-0", registered=("acme-support-v1",))
    with ServerThread(replica.app()) as upstream:
        folder = tmp_path / "manifests"
        m.write(
            folder,
            "all.yaml",
            [
                m.pool(),
                m.key_secret("acme", KEYS["acme"]),
                m.adapter("acme-support-v1", "acme"),
                *default_aliases()[:1],
            ],
        )
        replicas = tmp_path / "replicas.json"
        replicas.write_text(json.dumps(m.replicas_doc({"replica-0": upstream.url})))
        (folder / "broken.yaml").write_text("kind: [\n")  # skipped with a warning
        port, internal = free_port(), free_port()
        env = {
            **os.environ,
            "LORAFLEET_GATEWAY_HOST": "127.0.0.1",
            "LORAFLEET_GATEWAY_PORT": str(port),
            "LORAFLEET_GATEWAY_INTERNAL_PORT": str(internal),
            "LORAFLEET_GATEWAY_MANIFESTS_DIR": str(folder),
            "LORAFLEET_GATEWAY_REPLICAS_FILE": str(replicas),
        }
        log_path = tmp_path / "gateway.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lorafleet_gateway"], env=env, stderr=log, cwd=REPO
            )
        try:
            eventually(
                lambda: httpx.get(f"http://127.0.0.1:{internal}/readyz").status_code == 200,
                within_s=60,
                interval_s=0.2,
                what="gateway ready",
                ignore=(httpx.HTTPError,),
                abort=lambda: None if proc.poll() is None else log_path.read_text(),
            )
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEYS["acme"])
            out = client.chat.completions.create(
                model="acme/support:prod",
                messages=MSG_DEFAULT,
                extra_headers={"x-request-id": "log-format-1"},
            )
            assert "|acme-support-v1]" in (out.choices[0].message.content or "")
            eventually(
                lambda: '"adapter_id":"acme-support-v1"' in log_path.read_text(),
                within_s=5,
                what="the request's log line",
            )
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    lines = json_lines(log_path.read_text())
    (request,) = [x for x in lines if x["logger"] == "lorafleet.gateway.requests"]
    assert (request["level"], request["message"], request["status"]) == ("INFO", "request", 200)
    assert (request["request_id"], request["tenant"]) == ("log-format-1", "acme")
    assert (request["adapter_id"], request["replica"]) == ("acme-support-v1", "replica-0")
    (skipped,) = [x for x in lines if "broken.yaml" in x["message"]]
    assert (skipped["level"], skipped["logger"]) == ("WARNING", "lorafleet_gateway.catalog_files")
    assert KEYS["acme"] not in log_path.read_text()


def test_batching_handler_writes_every_line():
    stream = io.StringIO()
    handler = BatchingHandler(stream, interval_s=0.05)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("lorafleet.test.batching")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for i in range(100):
            logger.warning("line %d", i)
        handler.add_line("direct")
        expected = [f"line {i}" for i in range(100)] + ["direct"]
        # Written by the handler's own thread (interval 50 ms), not by a flush from here.
        eventually(lambda: stream.getvalue().splitlines() == expected, what="batched lines")
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_batching_handler_keeps_a_line_added_while_the_writer_drains():
    """The race, made deterministic: a request thread has looked up the batch and is about to
    append its line when the writer thread takes the batch and writes it. The line must still
    be written by the next flush, not appended to a batch nobody will write again."""
    stream = io.StringIO()
    handler = BatchingHandler(stream, interval_s=3600)  # the writer thread stays idle here
    handler.add_line("before")
    drained: list[bool] = []

    def pause_at_append(frame: FrameType, event: str, arg: object) -> None:
        # c_call of `append` from add_line: the container is already resolved, not yet used.
        if event == "c_call" and frame.f_code.co_name == "add_line" and not drained:
            drained.append(True)
            writer = threading.Thread(target=handler.flush)
            writer.start()
            writer.join(timeout=5)

    sys.setprofile(pause_at_append)
    try:
        handler.add_line("racing")
    finally:
        sys.setprofile(None)
    assert drained == [True]
    assert stream.getvalue().splitlines() == ["before"]  # what the writer took mid-append
    handler.close()
    assert stream.getvalue().splitlines() == ["before", "racing"]


def test_tenant_slo_counters_are_bounded_to_tenants_active_in_the_window():
    now = [0.0]
    slo = TenantSLO(window_s=10.0, clock=lambda: now[0])
    for i in range(5000):
        slo.observe(f"t{i}", over_target=False)
    now[0] = 6.0
    for _ in range(5):
        slo.observe("loud", over_target=True)
    slo.observe("slow", over_target=False)
    families = {f.name: f for f in slo.collect()}
    requests = {s.labels["tenant"]: s.value for s in families[GATEWAY_TENANT_REQUESTS].samples}
    over = {s.labels["tenant"]: s.value for s in families[GATEWAY_TENANT_TTFT_OVER_TARGET].samples}
    assert len(requests) == 5002
    assert (requests["loud"], over["loud"], over["slow"]) == (5, 5, 0)
    now[0] = 12.0  # the 5,000 one-off tenants are idle for longer than the window
    assert set(slo.counts()) == {"loud", "slow"}
    assert len(slo) == 2
    now[0] = 30.0
    assert slo.counts() == {}


def test_the_public_server_reports_listening_only_once_its_port_accepts_connections():
    """/readyz waits for this: the catalog and the first replica poll finish in the lifespan,
    before uvicorn binds, while the internal port already answers (a CI run once saw ready
    and then a refused connection on the public port)."""

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] == "lifespan":  # a lifespan that takes a moment, as the gateway's
            message = await receive()  # type: ignore[operator]
            assert message["type"] == "lifespan.startup"
            await asyncio.sleep(0.2)
            await send({"type": "lifespan.startup.complete"})  # type: ignore[operator]
            await receive()  # type: ignore[operator]
            await send({"type": "lifespan.shutdown.complete"})  # type: ignore[operator]

    port = free_port()
    accepted: list[bool] = []

    def on_listening() -> None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            accepted.append(True)
        except OSError:
            accepted.append(False)
        server.should_exit = True

    server = _Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None),
        on_listening=on_listening,
    )
    asyncio.run(asyncio.wait_for(server.serve(), timeout=20))
    assert accepted == [True]


def test_the_gateway_is_not_ready_while_its_public_port_is_closed(tmp_path: Path):
    gw = Gateway(GatewaySettings(manifests_dir=tmp_path))
    gw.holder.loaded = True
    gw.tracker.healthy_ids = lambda: ["replica-0"]  # type: ignore[method-assign]
    assert gw.ready
    gw.public_port_open = False
    assert not gw.ready
