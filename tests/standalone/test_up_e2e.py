"""`lorafleet up` end to end: one subprocess (demo mode, 1 replica, real CPU vLLM) serves every
check in this module, in order; the last test stops it and looks for leftover processes.
It is the session's shared demo `up` (tests/standalone/up_harness.py: its pool also serves tool
calls, checked in test_up_demo_tool_calls), fresh if a module before this one stopped it.

What runs for real: the demo manifests and key, the reconciler with the operator's planners,
vLLM, the agent, the gateway, HTTP on loopback, and the official `openai` client. Early on,
while the fleet is whole, a real Prometheus scrapes it as the chart's monitors do and every
query of the chart's dashboard runs against it (tests/chart/dashboard_check.py): this `up`
serves that check too, rather than a fleet of its own.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from lorafleet_cli.main import main
from lorafleet_standalone import demo
from lorafleet_standalone.supervisor import group_members
from tests.chart.chart_render import rule_groups
from tests.chart.dashboard_check import (
    NAMESPACE,
    annotation_queries,
    ask,
    load_dashboard,
    monitor_jobs,
    panel_queries,
    problems,
    variable_queries,
)
from tests.log_lines import json_lines
from tests.prometheus_server import Prometheus, running_prometheus
from tests.standalone.up_harness import ASSETS, NOT_YET, SharedDemoUp, Up
from tests.waiting import eventually

pytestmark = pytest.mark.vllm


MARKERS = {
    "demo/zebra:prod": "ZEBRA-7",
    "demo/falcon:prod": "FALCON-3",
    "demo/otter:prod": "OTTER-9",
}


@pytest.fixture(scope="module")
def up(shared_demo_up: SharedDemoUp) -> Up:
    return shared_demo_up.get()


def test_each_demo_alias_answers_its_marker(up: Up) -> None:
    assert "lorafleet is serving on" in up.log_text()
    for model, marker in MARKERS.items():
        answer, adapter = up.ask(model)
        assert answer.startswith(marker), (model, answer)
        assert adapter == "demo-" + model.split("/")[1].split(":")[0] + "-v1"


# Dashboard panels that cannot have data in this scenario (title -> why). Anything else
# without a series fails the test, and so does a panel listed here that has data.
NO_OPERATOR = "the operator does not run in `lorafleet up` (its reconciler exports no metrics)"
ALLOWED_EMPTY = {
    "Evictions/min by tier (thrashing)": "3 demo adapters fit the pool's 4 GPU slots: nothing "
    "is evicted, and the counter has a child per tier only from the first eviction",
    "Adapter verification rejections": "every demo adapter passes verification; the counter "
    "has a child per reason only from the first rejection",
    "Operator sync pass duration p50 / p99": NO_OPERATOR,
    "Operator passes and writes /s": NO_OPERATOR,
    "Adapters by phase": NO_OPERATOR,
    "Aliases with a refused deploy": NO_OPERATOR,
}


@pytest.fixture(scope="module")
def prometheus(up: Up, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus scraping `up`'s gateway and replicas as the chart's monitors do, with
    the chart's rules, after traffic that makes the dashboard's series: streamed and
    non-streamed answers over every alias and a burst the rate limit partly refuses, then
    more answers, so every counter was scraped before and after an increase."""
    status = up.status()
    replicas = [(r["id"], demo.DEMO_POOL, r["internalUrl"]) for r in status["replicas"]]
    jobs = monitor_jobs(status["gateway"]["internalUrl"], replicas)
    folder = tmp_path_factory.mktemp("prometheus")
    with running_prometheus(folder, jobs, rule_groups()) as prom:
        for model, marker in MARKERS.items():
            assert up.ask(model)[0].startswith(marker)
            assert up.ask_stream(model).startswith(marker)

        def refused_in_part() -> list[int]:
            statuses = up.burst("demo/otter:prod", 40)
            return statuses if 429 in statuses else []

        statuses = eventually(refused_in_part, within_s=60, what="a burst over the rate limit")
        assert 200 in statuses, statuses
        prom.wait_for_scrapes_after(time.time())
        for model in MARKERS:
            up.ask(model)
            up.ask_stream(model)
        scraped = prom.wait_for_scrapes_after(time.time())
        prom.wait_for_rules_after(scraped)
        yield prom


def test_every_dashboard_panel_has_data_in_a_real_prometheus(prometheus: Prometheus) -> None:
    """Every panel's every query parses and returns series (ALLOWED_EMPTY apart), every
    template variable lists this fleet's values, and the annotation's query parses."""
    dashboard = load_dashboard()
    answers = [ask(prometheus, q) for q in panel_queries(dashboard)]
    print("\n".join(f"{a.query.panel} [{a.query.ref}]: {a.summary()}" for a in answers))
    assert problems(answers, ALLOWED_EMPTY) == []
    variables = {
        name: prometheus.label_values(label, selector)
        for name, (selector, label) in variable_queries(dashboard).items()
    }
    assert variables == {"namespace": [NAMESPACE], "pool": [demo.DEMO_POOL], "tenant": ["demo"]}
    assert [ask(prometheus, q).error for q in annotation_queries(dashboard)] == [None]


@pytest.mark.parametrize(
    ("old", "new", "reported"),
    [
        ("sum by (status) (", "sum by (status) ((", "bad_data"),
        ("lorafleet_gateway_requests_total", "lorafleet_gateway_request_total", "no series"),
    ],
    ids=["unbalanced-parenthesis", "renamed-metric"],
)
def test_a_broken_panel_query_is_reported(
    prometheus: Prometheus, old: str, new: str, reported: str
) -> None:
    """The check can fail: one panel's expression broken in a copy of the dashboard (a syntax
    error, a metric renamed) is reported for that panel, and nothing else is."""
    dashboard = load_dashboard()
    panel = "Requests/s by status"
    (target,) = next(p for p in dashboard["panels"] if p["title"] == panel)["targets"]
    (query,) = [q for q in panel_queries(dashboard) if q.panel == panel]
    assert ask(prometheus, query).series  # intact, the panel has data
    assert old in target["expr"]
    target["expr"] = target["expr"].replace(old, new)
    found = problems([ask(prometheus, q) for q in panel_queries(dashboard)], ALLOWED_EMPTY)
    assert len(found) == 1, found
    assert found[0].startswith((f"{panel} [", f"{panel}:")), found
    assert reported in found[0], found


def test_editing_an_alias_file_switches_the_next_request(up: Up) -> None:
    path = up.manifests / "adapteralias-demo-zebra-prod.yaml"
    alias = yaml.safe_load(path.read_text())
    alias["spec"]["adapter"] = "demo-otter-v1"
    path.write_text(yaml.safe_dump(alias))
    # The gateway re-reads the folder every second; the first answer after that is the new one.
    eventually(
        lambda: up.ask("demo/zebra:prod")[1] == "demo-otter-v1",
        within_s=20,
        what="alias switch",
        ignore=NOT_YET,
        abort=up.exited,
    )
    answer, _ = up.ask("demo/zebra:prod")
    assert answer.startswith("OTTER-9")
    assert up.ask("demo/falcon:prod")[0].startswith("FALCON-3")  # others untouched

    # The reconciler recorded the deploy, so the CLI can roll it back.
    eventually(
        lambda: up.reconcile()["models"]["demo/zebra:prod"] == "demo-otter-v1",
        within_s=10,
        what="status",
        ignore=NOT_YET,
        abort=up.exited,
    )
    assert main(["alias", "rollback", "demo/zebra:prod", "--manifests", str(up.manifests)]) == 0
    eventually(
        lambda: up.ask("demo/zebra:prod")[1] == "demo-zebra-v1",
        within_s=20,
        what="rollback",
        ignore=NOT_YET,
        abort=up.exited,
    )
    assert up.ask("demo/zebra:prod")[0].startswith("ZEBRA-7")


def test_push_and_deploy_a_new_version(up: Up, capsys: pytest.CaptureFixture[str]) -> None:
    """The README tour: push a PEFT folder as v2 of zebra, deploy it with `alias set`."""
    src = up.state / "objectstore" / "demo" / "zebra" / "v1"  # where the demo put v1
    folder = up.state.parent / "my-adapter"
    shutil.copytree(src, folder)
    m = ["--manifests", str(up.manifests), "--state-dir", str(up.state)]
    rc = main(["adapter", "push", str(folder), "--tenant", "demo", "--name", "zebra",
               "--version", "v2", "--pool", "demo", "--quiet", *m])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert main(["alias", "set", "demo/zebra:prod", "demo-zebra-v2", *m]) == 0
    eventually(
        lambda: up.ask("demo/zebra:prod")[1] == "demo-zebra-v2",
        within_s=30,
        what="deploy of v2",
        ignore=NOT_YET,
        abort=up.exited,
    )
    assert up.ask("demo/zebra:prod")[0].startswith("ZEBRA-7")

    # `status` shows the reconciler's last pass, which may trail the gateway by one poll.
    eventually(
        lambda: up.reconcile().get("models", {}).get("demo/zebra:prod") == "demo-zebra-v2",
        within_s=30,
        what="reconciler sees v2",
        ignore=NOT_YET,
        abort=up.exited,
    )
    capsys.readouterr()
    assert main(["status", "--state-dir", str(up.state), "--manifests", str(up.manifests)]) == 0
    out = capsys.readouterr().out
    assert "demo-0: queue 0" in out
    assert "hit rate by tier" in out
    assert "demo/zebra:prod -> demo-zebra-v2" in out


def test_a_version_removed_and_registered_again_with_other_weights_serves_the_new_ones(
    up: Up, capsys: pytest.CaptureFixture[str]
) -> None:
    """A LoRAAdapter's manifest removed while the agent holds its record, then written again
    under the same name with other weights (otter's files and checksum): `up` has the agent
    forget the old record, so the new one loads and answers. Before, the agent refused the new
    record as a conflict with the one it held (409 `record_conflict`, requests 422
    `adapter_rejected`) until it restarted."""
    m = ["--manifests", str(up.manifests), "--state-dir", str(up.state)]
    folder = up.state.parent / "zebra-v3"
    shutil.copytree(up.state / "objectstore" / "demo" / "zebra" / "v1", folder)
    rc = main(["adapter", "push", str(folder), "--tenant", "demo", "--name", "zebra",
               "--version", "v3", "--pool", "demo", "--quiet", *m])  # fmt: skip
    assert rc == 0, capsys.readouterr().err

    def serves(adapter: str, marker: str) -> None:
        assert main(["alias", "set", "demo/zebra:prod", adapter, *m]) == 0
        eventually(
            lambda: up.ask("demo/zebra:prod")[1] == adapter,
            within_s=30,
            what=f"deploy of {adapter}",
            ignore=NOT_YET,
            abort=up.exited,
        )
        assert up.ask("demo/zebra:prod")[0].startswith(marker)

    def adapter_manifest(name: str) -> tuple[Path, dict[str, Any]]:
        (found,) = [
            (f, doc)
            for f in up.manifests.glob("*.yaml")
            for doc in yaml.safe_load_all(f.read_text())
            if doc and doc["kind"] == "LoRAAdapter" and doc["metadata"]["name"] == name
        ]
        return found

    serves("demo-zebra-v3", "ZEBRA-7")  # the agent now holds v3's record
    serves("demo-zebra-v1", "ZEBRA-7")
    path, v3 = adapter_manifest("demo-zebra-v3")
    _, otter = adapter_manifest("demo-otter-v1")
    path.unlink()
    agent_log = next((up.state / "logs").glob("*-agent.log"))
    eventually(
        lambda: any(
            d["message"].startswith("forgot adapter demo-zebra-v3")
            for d in json_lines(agent_log.read_text())
        ),
        within_s=30,
        what="the agent forgets demo-zebra-v3",
        abort=up.exited,
    )
    path.write_text(yaml.safe_dump({**otter, "metadata": v3["metadata"]}))
    serves("demo-zebra-v3", "OTTER-9")
    serves("demo-zebra-v1", "ZEBRA-7")


def test_bad_manifests_are_reported_and_nothing_else_stops(up: Up) -> None:
    pool = yaml.safe_load((up.manifests / "replicapool-demo.yaml").read_text())
    base_hash = pool["spec"]["baseModel"]["hash"]
    good = yaml.safe_load((up.manifests / "loraadapter-demo-otter-v1.yaml").read_text())
    too_wide = {**good, "metadata": {"name": "demo-wide-v1"}}
    too_wide["spec"] = {**good["spec"], "rank": 64, "baseModelHash": base_hash}
    alien = {**good, "metadata": {"name": "demo-alien-v1"}}
    alien["spec"] = {**good["spec"], "baseModelHash": "sha256:" + "0" * 64}
    (up.manifests / "bad.yaml").write_text(yaml.safe_dump_all([too_wide, alien]))

    def problems() -> list[str]:
        return [p["text"] for p in up.reconcile()["problems"]]

    eventually(
        lambda: len(problems()) >= 2,
        within_s=15,
        what="problems reported",
        ignore=NOT_YET,
        abort=up.exited,
    )
    texts = problems()
    assert any("demo-wide-v1" in t and "RankTooHigh" in t and "maxRank 16" in t for t in texts)
    assert any("demo-alien-v1" in t and "BaseModelMismatch" in t for t in texts)
    # `up` writes reconcile.json, then logs what is new in it: the line may trail the file.
    reported = "manifest problem: bad.yaml: LoRAAdapter/demo-wide-v1: rejected (RankTooHigh)"
    eventually(lambda: reported in up.log_text(), within_s=10, what="the problem logged")
    # Nothing else stopped: every process still runs, never restarted, every alias answers,
    # as of a supervisor check made after the problems were reported (up.json refreshed).
    reported_at = up.status()["updatedAt"]
    eventually(lambda: up.status()["updatedAt"] > reported_at + 1, within_s=15, ignore=NOT_YET)
    procs = up.status()["processes"]
    assert all(p["running"] and p["restarts"] == 0 for p in procs.values()), procs
    assert up.ask("demo/falcon:prod")[0].startswith("FALCON-3")
    assert up.ask("demo/otter:prod")[0].startswith("OTTER-9")


def test_the_inside_of_a_replica_is_authenticated(up: Up) -> None:
    """vLLM takes only its agent's key; the agent's load/unload take only the fleet token."""
    replica = up.status()["replicas"][0]
    vllm, internal, rid = replica["vllmUrl"], replica["internalUrl"], replica["id"]
    folder = up.state / "objectstore" / "demo" / "otter" / "v1"
    squat = httpx.post(
        f"{vllm}/v1/load_lora_adapter",
        json={"lora_name": "demo-squat-v1", "lora_path": str(folder)},
        timeout=30,
    )
    assert squat.status_code == 401
    assert httpx.get(f"{vllm}/v1/models", timeout=10).status_code == 401
    record = {"id": "demo-squat-v1", "tenant": "demo"}
    url = f"{internal}/internal/replicas/{rid}/adapters/demo-squat-v1"
    assert httpx.post(f"{url}/load", json={"record": record}, timeout=30).status_code == 401
    assert httpx.post(f"{url}/unload", timeout=30).status_code == 401
    assert httpx.get(f"{internal}/internal/replicas/{rid}/state", timeout=10).status_code == 200
    # The data port serves only the gateway: a local process naming an adapter id directly
    # (skipping API keys and tenant isolation) is refused, the internal token is not it either.
    adapter_id = up.ask("demo/otter:prod")[1]
    body = {"model": adapter_id, "prompt": "hi", "max_tokens": 2}
    for headers in ({}, {"authorization": "Bearer wrong"}):
        bypass = httpx.post(
            f"{replica['dataUrl']}/v1/completions", json=body, headers=headers, timeout=30
        )
        assert bypass.status_code == 401, bypass.text
        assert bypass.json()["error"]["code"] == "unauthorized"
    assert up.ask("demo/otter:prod")[0].startswith("OTTER-9")  # the gateway holds the tokens


def test_vllm_killed_mid_stream_ends_the_stream_cleanly_and_serving_resumes_without_404(
    up: Up,
) -> None:
    """SIGKILL the replica's engine during a stream; `lorafleet up` restarts it."""

    def long_stream() -> Any:
        return up.client().chat.completions.create(
            model="demo/falcon:prod",
            messages=[{"role": "user", "content": "Tell me about the weather today"}],
            max_tokens=220,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},  # long enough to be cut mid-stream
        )

    def drain() -> int:
        try:
            return sum(1 for _ in long_stream())
        except openai.APIError:
            return -1

    def kill_during_a_stream() -> bool:
        """SIGKILL vLLM after the first chunk; True when the kill landed inside the stream."""
        # Company in the batch stretches the measured stream, so the kill usually lands inside
        # it; on a busy 2-core machine the relay can still be bursty and the whole answer out
        # before the kill arrives, which proves nothing: then the caller tries again.
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            others = [pool.submit(drain) for _ in range(12)]
            chunks = iter(long_stream())
            assert next(chunks) is not None  # the stream is open and flowing
            engine = up.status()["processes"]["demo-0/vllm"]
            os.killpg(engine["pid"], signal.SIGKILL)
            killed = time.monotonic()
            try:
                for _ in chunks:
                    pass
            except openai.APIError:  # the in-band SSE error event, not a hang
                assert time.monotonic() - killed < 2.0
                return True
            finally:
                assert all(f.result(timeout=30) for f in others)  # each ended, none hangs
            return False

    statuses: list[int] = []

    def serving() -> bool:
        try:
            return up.ask("demo/zebra:prod")[0].startswith("ZEBRA-7")
        except openai.APIStatusError as exc:
            statuses.append(exc.status_code)
            return False

    # One kill. Whether it lands inside the measured stream depends on how fast this machine's
    # tiny engine finishes 220 tokens (an idle machine can be done before the signal lands), so
    # here a clean end is accepted as well; the cut itself, made deterministic by a throttling
    # proxy, is asserted in tests/e2e/test_e2e_engine_faults.py. What `lorafleet up` must show
    # is below: the engine restarted, 503 (never 404) meanwhile, every alias serving again.
    kill_during_a_stream()
    kills = 1
    eventually(serving, within_s=300, what="serving again after vLLM's restart", abort=up.exited)
    assert 404 not in statuses, statuses  # while down: 503 (retry), never "no such model"
    for model, marker in MARKERS.items():
        assert up.ask(model)[0].startswith(marker), model
    procs = up.status()["processes"]
    assert procs["demo-0/vllm"]["restarts"] == kills
    assert procs["demo-0/agent"]["restarts"] == 0  # the agent was never restarted


def test_agent_killed_is_restarted_and_serves_from_its_disk_cache(up: Up) -> None:
    agent = up.status()["processes"]["demo-0/agent"]
    os.killpg(agent["pid"], signal.SIGKILL)
    statuses: list[int] = []

    def serving() -> bool:
        try:
            return up.ask("demo/otter:prod")[0].startswith("OTTER-9")
        except openai.APIStatusError as exc:
            statuses.append(exc.status_code)
            return False

    eventually(
        serving, within_s=120, what="serving again after the agent's restart", abort=up.exited
    )
    assert set(statuses) <= {503}, statuses  # unavailable while it restarts, nothing else
    for model, marker in MARKERS.items():
        assert up.ask(model)[0].startswith(marker), model
    assert up.status()["processes"]["demo-0/agent"]["restarts"] == 1


def test_gateway_killed_mid_stream_is_restarted_and_serves_again(up: Up) -> None:
    stream = up.client().chat.completions.create(
        model="demo/zebra:prod",
        messages=[{"role": "user", "content": "Tell me about the weather today"}],
        max_tokens=220,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = iter(stream)
    assert next(chunks) is not None
    gateway = up.status()["processes"]["gateway"]
    os.killpg(gateway["pid"], signal.SIGKILL)
    # The client sees the connection end (an error, or the stream cut short), never a hang.
    with contextlib.suppress(openai.APIError, httpx.HTTPError):
        for _ in chunks:
            pass

    def serving() -> bool:
        try:
            return up.ask("demo/zebra:prod")[0].startswith("ZEBRA-7")
        except (openai.APIConnectionError, openai.APIStatusError):
            return False

    eventually(serving, within_s=120, what="serving after the gateway's restart", abort=up.exited)
    assert up.status()["processes"]["gateway"]["restarts"] == 1
    assert "gateway exited with code -9; restart #1" in up.log_text()


def _second_up(up: Up, state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lorafleet_cli.main", "up", "--state-dir", str(state),
         "--manifests", str(up.manifests), "--quiet", *extra],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "LORAFLEET_DEMO_ASSETS": str(ASSETS)},
    )  # fmt: skip


def test_a_second_up_on_the_same_state_folder_is_refused_and_changes_nothing(up: Up) -> None:
    before = up.status()
    done = _second_up(up, up.state, "--port", "0", "--internal-port", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "another `lorafleet up` is running" in done.stdout
    after = up.status()
    assert after["pid"] == before["pid"]
    assert after["processes"].keys() == before["processes"].keys()
    assert up.ask("demo/otter:prod")[0].startswith("OTTER-9")


def test_a_second_up_on_a_taken_port_is_refused_before_starting_anything(
    up: Up, tmp_path: Path
) -> None:
    port = up.status()["gateway"]["url"].rsplit(":", 1)[1]
    done = _second_up(up, tmp_path / "other", "--port", port, "--internal-port", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"gateway port {port} on 127.0.0.1 is in use" in done.stdout, done.stdout
    assert "starting" not in done.stdout  # no vLLM was started for it
    assert up.ask("demo/otter:prod")[0].startswith("OTTER-9")


def test_status_of_the_running_up(up: Up, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--state-dir", str(up.state), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["phase"] == "ready"
    assert all(p["running"] for p in report["processes"].values()), report["processes"]


# vLLM's own text format (`INFO 12-06 21:23:50 [api_server.py:12] ...`, with or without its
# process prefix) and uvicorn's (`INFO:     127.0.0.1:... "POST ..." 200`).
VLLM_TEXT_LINE = re.compile(
    r"^(?:\(\S+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: \d\d-\d\d \d\d:| *:  )", re.M
)


def test_ctrl_c_stops_everything_and_leaves_no_processes(up: Up) -> None:
    pids = [p["pid"] for p in up.status()["processes"].values()]
    assert pids
    assert all(group_members(pid) for pid in pids)
    os.kill(up.proc.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground process
    assert up.proc.wait(90) == 0
    # Each child led its own process group; none of them (nor any grandchild) is left.
    leftovers = {pid: group_members(pid) for pid in pids}
    assert not any(leftovers.values()), leftovers
    final = up.status()
    assert final["phase"] == "stopped"
    assert not any(p["running"] for p in final["processes"].values()), final["processes"]
    assert "[lorafleet up] stopped" in up.log_text()
    # Its children wrote the JSON log format, stops and restarts too.
    logs = sorted((up.state / "logs").glob("*.log"))
    ours = [f for f in logs if not f.name.endswith("vllm.log")]
    assert {"gateway.log", "control.log"} <= {f.name for f in ours}
    assert any(f.name.endswith("agent.log") for f in ours)
    for log in ours:
        json_lines(log.read_text())
    # vLLM logs through lorafleet's format too (its config file): its loggers' and its HTTP
    # server's lines are JSON; what is not JSON there is printed by libraries (torch, tqdm).
    engines = [f for f in logs if f.name.endswith("vllm.log")]
    assert engines
    for log in engines:
        text = log.read_text()
        assert not VLLM_TEXT_LINE.search(text), VLLM_TEXT_LINE.search(text)
        docs = json_lines("\n".join(x for x in text.splitlines() if x.startswith('{"time"')))
        loggers = {d["logger"].split(".")[0] for d in docs}
        assert {"vllm", "uvicorn"} <= loggers, loggers
