"""One log format for every lorafleet process: the gateway, the agent, the operator (kopf's
own loggers included), the control API and the merge jobs, and for the vLLM engine beside the
agent (`engine_logging_config`, a file vLLM reads at start).

`LORAFLEET_LOG_FORMAT` chooses it (`LogSettings`):

- `json` (the default, what the images and the chart run): one JSON object per line, with
  `time` (RFC 3339, UTC, milliseconds), `level`, `logger`, `message`, then where known
  `request_id`, `tenant`, `adapter_id`, `replica`, kopf's object (`kind`, `object` as
  namespace/name), and `exception` (the whole traceback as one string, so a line stays a line).
- `text`: `time level logger message key=value ...` and tracebacks as Python prints them, for
  a person reading a terminal.

`configure` installs it on the root logger, so lines of third-party loggers (uvicorn, kopf,
asyncio, `warnings`) come out in the same format, and an uncaught exception becomes a line too.
The context fields are read when a record is made (`ContextFilter`), not when it is formatted:
a batching handler (the gateway's) formats on another thread, outside the request's context.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lorafleet_core.web import request_ids

LogFormat = Literal["json", "text"]
DEFAULT_FORMAT: Final[LogFormat] = "json"
FORMAT_ENV: Final = "LORAFLEET_LOG_FORMAT"

# Fields a line carries when the process or the request being served knows them.
CONTEXT_FIELDS: Final = ("request_id", "tenant", "adapter_id", "replica")

# Third-party loggers that say one INFO line per HTTP call: the request path's cost, and noise.
QUIET_LOGGERS: Final = ("httpx", "httpcore")

_COMPACT: Final = (",", ":")

_context: ContextVar[Mapping[str, str] | None] = ContextVar("lorafleet_log_context", default=None)


class LogSettings(BaseSettings):
    """Read by every lorafleet process at start, beside its component's own settings."""

    model_config = SettingsConfigDict(env_prefix="LORAFLEET_LOG_", extra="ignore")

    format: LogFormat = Field(
        default=DEFAULT_FORMAT,
        description="json: one JSON object per line (time, level, logger, message, request_id, "
        "tenant, adapter_id, replica where known, exception as one field), for a log pipeline; "
        "text: `time level logger message key=value` lines for a terminal. Read by the "
        "gateway, the agent, the operator and the control API; the operator passes its own "
        "value to the replica pods, `lorafleet up` to its children",
    )


def bind(**fields: str | None) -> None:
    """Name `fields` (tenant, adapter_id, ...) in every line logged from here on in the current
    context: the rest of the request being served, and the tasks it starts."""
    known = {k: v for k, v in fields.items() if v is not None}
    if known:
        _context.set({**(_context.get() or {}), **known})


RFC3339_CHECK: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def rfc3339(created: float) -> str:
    """`2026-12-06T03:26:10.123Z`: UTC, milliseconds."""
    whole = int(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + (
        f".{int((created - whole) * 1000):03d}Z"
    )


class ContextFilter(logging.Filter):
    """Stamps each record with the context fields: the process's own (`static`, e.g. the
    agent's replica id), then those of the request being served, then the record's `extra`."""

    def __init__(self, static: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.static = dict(static or {})

    def filter(self, record: logging.LogRecord) -> bool:
        found = {**self.static, **(_context.get() or {})}
        request_id = request_ids.current.get()
        if request_id is not None:
            found["request_id"] = request_id
        for key, value in found.items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        return True


def _kopf_object(record: logging.LogRecord) -> dict[str, str]:
    """kopf's object loggers say which resource a line is about in `k8s_ref`."""
    ref = getattr(record, "k8s_ref", None)
    if not isinstance(ref, Mapping):
        return {}
    out = {}
    if ref.get("kind"):
        out["kind"] = str(ref["kind"])
    if ref.get("name"):
        namespace = ref.get("namespace")
        out["object"] = f"{namespace}/{ref['name']}" if namespace else str(ref["name"])
    return out


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key in CONTEXT_FIELDS:
        value = getattr(record, key, None)
        if value is not None:
            found[key] = value
    return found | _kopf_object(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, separators=_COMPACT, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return rfc3339(record.created)  # the JSON lines' time: one clock to compare by

    def format(self, record: logging.LogRecord) -> str:
        line, _, trace = super().format(record).partition("\n")
        extra = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        line = f"{line} {extra}" if extra else line
        return f"{line}\n{trace}" if trace else line


def formatter(fmt: LogFormat) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


# vLLM applies the dictConfig file this variable names when it is imported (its engine-core
# processes too) and hands the same file to its uvicorn, so one file puts every log line of the
# engine in lorafleet's format: the replica image writes it at build (replica-image/Dockerfile),
# `lorafleet up` into its log folder. Set to "" to get vLLM's own format back.
ENGINE_LOGGING_ENV: Final = "VLLM_LOGGING_CONFIG_PATH"
# What vLLM's process logs through: its own loggers and its HTTP server's.
ENGINE_LOGGERS: Final = ("vllm", "uvicorn", "uvicorn.error", "uvicorn.access")


def env_formatter() -> logging.Formatter:
    """The formatter `LORAFLEET_LOG_FORMAT` names, read when a dictConfig builds it (`"()"`)."""
    return formatter(LogSettings().format)


def engine_logging_config() -> dict[str, Any]:
    """The dictConfig for vLLM's process: every logger to stderr through `env_formatter`."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"lorafleet": {"()": f"{__name__}.{env_formatter.__name__}"}},
        "handlers": {
            "lorafleet": {
                "class": "logging.StreamHandler",
                "formatter": "lorafleet",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": "INFO", "handlers": ["lorafleet"]},
        # vLLM's and uvicorn's defaults give these handlers of their own; none here, so each
        # line goes to the root's handler once.
        "loggers": {
            name: {"level": "INFO", "handlers": [], "propagate": True} for name in ENGINE_LOGGERS
        },
    }


def write_engine_logging_config(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(engine_logging_config(), indent=2) + "\n")
    return path


_format: LogFormat = DEFAULT_FORMAT  # what `configure` installed; `structured_line` follows it


def replica_log_format() -> LogFormat | None:
    """What the operator passes to its replica pods: its own format when not the default, else
    None (the pod template stays as it was, so an upgrade restarts no replica)."""
    return None if _format == DEFAULT_FORMAT else _format


def structured_line(logger: str, message: str, fields: Mapping[str, Any]) -> str:
    """An INFO line with `fields` beside the message, in the configured format, made without a
    LogRecord (the gateway's per-request line: a record costs as much as the line itself)."""
    if _format == "json":
        head = {"time": rfc3339(time.time()), "level": "INFO", "logger": logger}
        return json.dumps({**head, "message": message, **fields}, separators=_COMPACT, default=str)
    stamp = rfc3339(time.time())
    pairs = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
    return f"{stamp} INFO {logger} {message} {pairs}"


def _log_uncaught(
    kind: type[BaseException], exc: BaseException, trace: TracebackType | None
) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, trace)
        return
    logging.getLogger("lorafleet").critical("uncaught exception", exc_info=(kind, exc, trace))


def _log_thread_uncaught(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("lorafleet").critical(
        "uncaught exception in thread %s",
        name,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def configure(
    level: str | int = "INFO",
    *,
    handler: logging.Handler | None = None,
    fmt: LogFormat | None = None,
    **static: str,
) -> logging.Handler:
    """Every line of this process through `handler` (stderr by default) in the format of
    `LORAFLEET_LOG_FORMAT` (or `fmt`); `static` fields go on every line (the agent's replica).

    Replaces the root logger's handlers (kopf's included), so call it after `kopf.configure`;
    servers must start uvicorn with `log_config=None`, or its dictConfig installs handlers of
    its own that write plain text beside these.
    """
    global _format
    _format = fmt or LogSettings().format
    handler = handler or logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter(static))
    handler.setFormatter(formatter(_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.captureWarnings(True)  # `warnings.warn` writes to stderr itself otherwise
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_thread_uncaught
    return handler
