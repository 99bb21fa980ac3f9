"""One structured log line per completion request, and the gateway's log writer.

The line is in the format every lorafleet process writes (lorafleet_core.logs: JSON by default,
logger `lorafleet.gateway.requests`, message `request`), with the fields request_id
(lorafleet_core.web.request_ids: the same id the client, the agent and vLLM see), tenant,
model, adapter_id, replica, tier, status, ttft_ms, prompt_tokens, completion_tokens,
duration_ms, attempts, route, error. Never an API key or a prompt; no field longer than
FIELD_CHARS.

The process writes its log through a batching handler: a request only formats its line and
appends it to a deque; a background thread writes what accumulated every 200 ms in one write.
A flush per line (logging's default) cost more than all of the gateway's routing logic.

The writer drains the one deque with popleft and never swaps it for a new container: with a
swap, a request thread that had already looked up the old container could append its line
after the writer took and wrote it, and the line was lost (tests/gateway/test_gateway_process
replays exactly that interleaving). deque.append and popleft are atomic, so no lock is needed
on the request path.
"""

from __future__ import annotations

import atexit
import json
import logging
import sys
import threading
from collections import deque
from typing import Any, TextIO

from lorafleet_core import logs
from lorafleet_core.web import request_ids

request_log = logging.getLogger("lorafleet.gateway.requests")


_sink: BatchingHandler | None = None  # set by configure_logging: the process's fast path


FIELD_CHARS = 256  # the longest string a log field keeps: a line never grows with the input


def _bounded(fields: dict[str, Any]) -> dict[str, Any]:
    for key, value in fields.items():
        if isinstance(value, str) and len(value) > FIELD_CHARS:
            fields[key] = value[: FIELD_CHARS - 1] + "\u2026"
    return fields


def log_request(**fields: Any) -> None:
    """One request's line. String fields may hold client input (the model name): each is
    cut to FIELD_CHARS."""
    fields = _bounded({"request_id": request_ids.current.get(), **fields})
    sink = _sink
    if sink is not None and sink.request_lines:
        # Straight into the batch: a LogRecord per request costs as much as the line itself.
        sink.add_line(logs.structured_line(request_log.name, "request", fields))
    elif request_log.isEnabledFor(logging.INFO):
        # Without configure_logging (the gateway in another program's process): the fields as
        # the message, for whatever handlers that program has.
        request_log.info(json.dumps(fields, separators=(",", ":"), default=str))


class BatchingHandler(logging.Handler):
    """Formats on the caller's thread, writes in batches from a daemon thread."""

    def __init__(self, stream: TextIO, interval_s: float = 0.2) -> None:
        super().__init__()
        self.stream = stream
        self.interval_s = interval_s
        self._pending: deque[str] = deque()
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self.request_lines = True  # log_request writes its lines straight into this batch
        self._thread = threading.Thread(target=self._loop, name="log-writer", daemon=True)
        self._thread.start()
        atexit.register(self.flush)

    def add_line(self, line: str) -> None:
        self._pending.append(line)  # deque.append is atomic
        if self._stop.is_set():  # closed (e.g. by a logging reconfiguration): write through
            self.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.add_line(self.format(record))
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        with self._write_lock:  # one drainer at a time keeps the lines in order
            pending = self._pending
            lines = [pending.popleft() for _ in range(len(pending))]
            if lines:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception:  # a closed stream at exit must not kill the thread noisily
                return

    def close(self) -> None:
        self._stop.set()
        self.flush()
        super().close()


def configure_logging(level: str = "INFO") -> None:
    """Every line of the process (lorafleet_core.logs' format, on stderr), written in batches.
    Called again with the settings' level once they are read: a setting that fails is logged
    in the same format. `level` WARNING turns the request lines off."""
    global _sink
    if _sink is None:
        _sink = BatchingHandler(sys.stderr)
        logs.configure(level, handler=_sink)
    logging.getLogger().setLevel(level.upper())
    _sink.request_lines = request_log.isEnabledFor(logging.INFO)
