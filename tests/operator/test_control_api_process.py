"""The control API as `lorafleet up` starts it: its own process, from the runner's ProcessSpec.

The process spec (command line, environment) is the one `lorafleet up` uses; the test starts
it as a real process, waits on its health URL, registers an adapter over HTTP with the token
the runner wrote, and stops it with SIGTERM as the supervisor does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from lorafleet_core.api.names import KIND_ADAPTER
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_standalone import processes
from lorafleet_standalone.local_replicas import free_port
from lorafleet_standalone.state_files import CONTROL_TOKEN_FILE
from lorafleet_standalone.up_status import write_control_token
from tests.log_lines import json_lines
from tests.operator.control_support import registration
from tests.operator.factories import pool_body
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(90)


def test_standalone_control_process_serves_the_folder_with_the_runners_token(tmp_path: Path):
    manifests = tmp_path / "manifests"
    pool = pool_body("pool")
    del pool["metadata"]["namespace"]
    write_object(manifests, pool)
    replicas = tmp_path / "replicas.json"
    replicas.write_text(json.dumps({"replicas": []}))
    digest = write_control_token(tmp_path)
    token_file = tmp_path / CONTROL_TOKEN_FILE
    assert token_file.stat().st_mode & 0o077 == 0  # only the user can read the admin token
    port = free_port()
    spec = processes.control_process(
        manifests_dir=manifests,
        replicas_file=replicas,
        port=port,
        token_sha256=digest,
        log_dir=tmp_path,
    )
    assert token_file.read_text().strip() not in json.dumps(spec.env)  # only the hash travels
    env = {**os.environ, **spec.env}
    with open(tmp_path / "control.log", "wb") as log:
        proc = subprocess.Popen(list(spec.argv), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        assert spec.health_url is not None
        health_url = spec.health_url
        eventually(
            lambda: httpx.get(health_url, timeout=2).status_code == 200,
            within_s=60,
            ignore=(httpx.HTTPError,),
            abort=lambda: None if proc.poll() is None else f"exited {proc.returncode}",
        )
        auth = {"authorization": f"Bearer {token_file.read_text().strip()}"}
        url = f"http://127.0.0.1:{port}/internal/adapters"
        resp = httpx.post(url, json=registration("proc-v1"), headers=auth, timeout=10)
        assert resp.status_code == 201, resp.text
        assert [o.name for o in load_folder(manifests).of_kind(KIND_ADAPTER)] == ["proc-v1"]
        refused = httpx.post(url, json=registration("proc-v2"), timeout=10)
        assert refused.status_code == 401
        missing = httpx.get(
            f"http://127.0.0.1:{port}/internal/replicas/pool-0/state", headers=auth, timeout=10
        )
        assert missing.status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    # uvicorn shuts down gracefully, then re-raises the signal it caught (exit by SIGTERM).
    log_text = (tmp_path / "control.log").read_text()
    assert code in (0, -signal.SIGTERM), log_text[-3000:]
    assert "Traceback" not in log_text
    lines = json_lines(log_text)  # the shared log format, its start-up line included
    assert any(x["message"].startswith("lorafleet control API on http://") for x in lines)
