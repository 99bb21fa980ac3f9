"""Agents and a gateway as their own processes (`python -m ...`), configured by environment.

What `lorafleet up` and a pod do: each component in its own interpreter, so the 10,000-request
isolation run is not one Python process's GIL carrying the gateway, two agents and the client
(19 req/s in one process vs ~50 here, docs/reference/verification.md). Settings objects are
built and validated here as usual, then handed to the child as the LORAFLEET_* variables they
came from.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]


def settings_env(settings: BaseSettings) -> dict[str, str]:
    """The environment that makes `type(settings)()` in a child equal `settings`.

    Unset (None) fields stay out; complex fields are JSON (how pydantic-settings reads them);
    secrets are revealed, as the child must hold them.
    """
    prefix = str(settings.model_config.get("env_prefix", ""))
    dumped = settings.model_dump(mode="json")
    env: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            text = value.get_secret_value()
        elif isinstance(dumped[name], (list, dict)):
            text = json.dumps(dumped[name])
        elif isinstance(dumped[name], bool):
            text = "true" if dumped[name] else "false"
        else:
            text = str(dumped[name])
        env[f"{prefix}{name.upper()}"] = text
    return env


@dataclass
class ChildProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def died(self) -> str | None:
        """The log's tail once the process has exited (an `eventually` abort)."""
        if self.process.poll() is None:
            return None
        return f"{self.name} exited {self.process.returncode}:\n{self.log_tail()}"


@contextmanager
def child_process(
    name: str, module: str, settings: BaseSettings, log_path: Path, ready_url: str
) -> Iterator[ChildProcess]:
    """`python -m module` with `settings` as its environment, until `ready_url` answers 200."""
    env = {**os.environ, **settings_env(settings)}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,  # its own group: a stray child never outlives the test
        )
    child = ChildProcess(name, proc, log_path)
    try:
        eventually(
            lambda: httpx.get(ready_url, timeout=5).status_code == 200,
            within_s=120,
            interval_s=0.2,
            what=f"{name} ready",
            ignore=(httpx.HTTPError,),
            abort=child.died,
        )
        yield child
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
