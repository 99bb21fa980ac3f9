"""The benchmarks' vLLM process steps (wait for /health, stop) against real processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from benchmarks.vllm_server import stop, wait_healthy
from tests.conftest import free_port

HEALTH_SERVER = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
    """
)


def test_wait_healthy_returns_once_the_server_answers_and_stop_ends_it():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", HEALTH_SERVER, str(port)])
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}", "server.log", within_s=30, poll_s=0.05)
        assert proc.poll() is None
    finally:
        stop(proc)
    assert proc.returncode is not None


def test_wait_healthy_names_the_log_when_the_server_exits_first():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match=r"exited with 3; see vllm\.log"):
        wait_healthy(proc, f"http://127.0.0.1:{free_port()}", "vllm.log", poll_s=0.05)


def test_wait_healthy_gives_up_after_its_budget():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(RuntimeError, match=r"not healthy in 0\.2 s"):
            wait_healthy(
                proc, f"http://127.0.0.1:{free_port()}", "x.log", within_s=0.2, poll_s=0.05
            )
    finally:
        stop(proc)


def test_stop_kills_a_server_that_ignores_sigterm():
    ignores = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(1, flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", ignores], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline()  # the handler is in place
    stop(proc, grace_s=0.3)
    assert proc.returncode == -9
