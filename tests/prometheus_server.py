"""A real Prometheus server for tests (Debian's `prometheus` package, the same that provides
promtool): started on a free loopback port with a temporary storage folder, a generated
scrape config of static targets and a rules file, and always stopped.

`running_prometheus` starts it and waits until it is ready; `Prometheus` queries its HTTP API
and waits on its own reports (`/api/v1/targets`, `/api/v1/rules`): a test waits until every
target was scraped after its traffic, and every rule group evaluated after that, never a
guessed time. Service discovery hands static targets to the scrape loop after ~5 s, so the
first scrape comes ~5 s after the start; Prometheus itself is ready in about a second.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.conftest import free_port
from tests.waiting import eventually

INTERVAL_S = 2


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job with one static target: `labels` are the target's labels before
    relabelling (`__meta_*` ones are relabelling sources and dropped after it, as Prometheus
    drops those of its Kubernetes discovery), `relabel_configs` in Prometheus's own spelling."""

    name: str
    url: str
    labels: Mapping[str, str] = field(default_factory=dict)
    relabel_configs: Sequence[Mapping[str, Any]] = ()

    def config(self) -> dict[str, Any]:
        parts = urlsplit(self.url)
        return {
            "job_name": self.name,
            "scheme": parts.scheme,
            "metrics_path": parts.path or "/metrics",
            "static_configs": [{"targets": [parts.netloc], "labels": dict(self.labels)}],
            "relabel_configs": [dict(r) for r in self.relabel_configs],
        }


def prometheus_spelling(relabeling: Mapping[str, Any]) -> dict[str, Any]:
    """A Prometheus Operator RelabelConfig (`sourceLabels`, `targetLabel`) as Prometheus's
    own relabel config (`source_labels`, `target_label`)."""
    return {re.sub(r"([A-Z])", r"_\1", k).lower(): v for k, v in relabeling.items()}


def _timestamp(text: str) -> float:
    """Prometheus's RFC 3339 times carry nanoseconds; Python reads microseconds."""
    trimmed = re.sub(r"(\.\d{6})\d*", r"\1", text).replace("Z", "+00:00")
    return datetime.fromisoformat(trimmed).timestamp()


@dataclass
class Prometheus:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def exited(self) -> str | None:
        if self.proc.poll() is None:
            return None
        tail = self.log.read_text(errors="replace")[-3000:]
        return f"prometheus exited ({self.proc.returncode}):\n{tail}"

    def api(self, path: str, **params: str) -> dict[str, Any]:
        """The API's JSON answer, errors included (a bad query is a 400 with `errorType`)."""
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        body: dict[str, Any] = r.json()
        return body

    def query(self, expr: str) -> dict[str, Any]:
        """An instant query at the current time, as a dashboard panel's last point."""
        return self.api("query", query=expr)

    def label_values(self, label: str, selector: str) -> list[str]:
        """What Grafana's `label_values(selector, label)` lists."""
        body = self.api(f"label/{label}/values", **{"match[]": selector})
        assert body["status"] == "success", body
        values: list[str] = body["data"]
        return values

    def wait_for_scrapes_after(self, moment: float, within_s: float = 60) -> float:
        """Wait until every target is up and has finished a scrape that started after
        `moment` (a `time.time()`); returns when the latest of those scrapes finished."""

        def scraped() -> float | None:
            targets = self.api("targets")["data"]["activeTargets"]
            if not targets:
                return None  # discovery has not handed them over yet
            done: list[float] = []
            for t in targets:
                started = _timestamp(t["lastScrape"])
                if t["health"] != "up" or started <= moment:
                    return None
                done.append(started + float(t["lastScrapeDuration"]))
            return max(done)

        finished = eventually(
            scraped,
            within_s=within_s,
            interval_s=0.2,
            what="every target scraped after the traffic",
            abort=self.exited,
        )
        assert finished is not None  # eventually returns a truthy value
        return finished

    def wait_for_rules_after(self, moment: float, within_s: float = 30) -> None:
        """Wait until every rule group has been evaluated after `moment`."""

        def evaluated() -> bool:
            groups = self.api("rules")["data"]["groups"]
            return bool(groups) and all(_timestamp(g["lastEvaluation"]) > moment for g in groups)

        eventually(
            evaluated,
            within_s=within_s,
            interval_s=0.2,
            what="every rule group evaluated after the scrapes",
            abort=self.exited,
        )

    def targets(self) -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = self.api("targets")["data"]["activeTargets"]
        return targets


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail("prometheus is missing: `apt-get install prometheus` (or `make install`)")
    return found


@contextlib.contextmanager
def running_prometheus(
    folder: Path, jobs: Sequence[ScrapeJob], rule_groups: Sequence[Mapping[str, Any]] = ()
) -> Iterator[Prometheus]:
    """Prometheus scraping `jobs` every INTERVAL_S and evaluating `rule_groups` as often,
    its config, storage and log in `folder`; ready when yielded, stopped on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rules.yaml").write_text(yaml.safe_dump({"groups": list(rule_groups)}))
    every = f"{INTERVAL_S}s"
    config = {
        "global": {
            "scrape_interval": every,
            "scrape_timeout": every,
            "evaluation_interval": every,
        },
        "rule_files": ["rules.yaml"],
        "scrape_configs": [j.config() for j in jobs],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log = folder / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={folder / 'prometheus.yml'}",
             f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    prom = Prometheus(proc, f"http://127.0.0.1:{port}", log)
    try:

        def ready() -> bool:
            return httpx.get(f"{prom.url}/-/ready", timeout=5).status_code == 200

        eventually(
            ready,
            within_s=30,
            interval_s=0.1,
            what="prometheus ready",
            ignore=(httpx.HTTPError,),
            abort=prom.exited,
        )
        yield prom
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
