"""Real HTTP servers answering an agent's GET /internal/replicas/{id}/state on loopback, and its
POST .../adapters/{adapter}/forget (recorded, answered as told)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StateServer:
    def __init__(self, replica_id: str) -> None:
        self.replica_id = replica_id
        self.state: dict[str, Any] = {"replica_id": replica_id}
        self.hits = 0
        # Answers still to be given late (`stall`), and late answers given so far.
        self._stalls: list[float] = []
        self.stalled = 0
        # Forget calls seen, (adapter, authorization header), and the answers still to give
        # them, (status, error code) each; then 200.
        self.forgets: list[tuple[str, str | None]] = []
        self.forget_answers: list[tuple[int, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != f"/internal/replicas/{owner.replica_id}/state":
                    self.send_error(404)
                    return
                owner.hits += 1
                late = owner._stalls.pop(0) if owner._stalls else 0.0
                if late:
                    time.sleep(late)  # a busy replica: this answer comes after the scraper gave up
                    owner.stalled += 1
                body = json.dumps(owner.state).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                prefix = f"/internal/replicas/{owner.replica_id}/adapters/"
                if not (self.path.startswith(prefix) and self.path.endswith("/forget")):
                    self.send_error(404)
                    return
                adapter = self.path[len(prefix) : -len("/forget")]
                owner.forgets.append((adapter, self.headers.get("authorization")))
                status, code = owner.forget_answers.pop(0) if owner.forget_answers else (200, "")
                answer: dict[str, Any] = {"adapter_id": adapter, "tier": "remote"}
                if status != 200:
                    answer = {"error": {"message": code, "type": "x", "param": None, "code": code}}
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

            def handle(self) -> None:
                # The scraper may have given up on a late answer (`stall`) and hung up.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    super().handle()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def set_load(self, tokens_in_flight: int = 0, queue_depth: int = 0, **extra: Any) -> None:
        self.state = {
            "replica_id": self.replica_id,
            "tokens_in_flight": tokens_in_flight,
            "queue_depth": queue_depth,
            **extra,
        }

    def stall(self, seconds: float, answers: int = 1) -> None:
        """Give the next `answers` answers `seconds` late (a replica too busy to answer in time)."""
        self._stalls.extend([seconds] * answers)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
