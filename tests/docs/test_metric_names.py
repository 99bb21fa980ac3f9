"""Every Prometheus metric the docs name is one the code exports, every metric the code exports
is documented, and every recording rule the docs name is one the chart records: a renamed metric
leaves a doc whose queries return nothing, so the names are checked here rather than by eye."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from tests.exported_metrics import SAMPLE_SUFFIXES, exported_families, series_names

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CHART = [p for p in sorted((ROOT / "charts").rglob("*")) if p.suffix in {".yaml", ".json", ".tpl"}]
# A metric name: the component's prefix and at least one more word (`lorafleet_agent` alone,
# `lorafleet_agent.manager` or `lorafleet_canary.prom` are a package, a module, a file).
METRIC = re.compile(r"\blorafleet_(?:agent|gateway|operator|canary)_[a-z0-9_]*[a-z0-9]")
# The docs' shorthand after a full name in the same line: `lorafleet_agent_queue_depth`,
# `_running_requests` names lorafleet_agent_running_requests.
SHORTHAND = re.compile(r"`(_[a-z0-9_]+)`")
PREFIX = re.compile(r"lorafleet_(?:agent|gateway|operator|canary)")


def exported_names() -> set[str]:
    """What the docs may name: a family (`lorafleet_agent_requests`) or a series."""
    families = exported_families()
    return set(families) | series_names(families)


def named_metrics(path: Path) -> Iterator[tuple[str, int]]:
    """(metric name, line) for every metric a file names, the docs' shorthand expanded."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in METRIC.finditer(line):
            yield match.group(0), number
        for short in SHORTHAND.finditer(line):
            before = PREFIX.findall(line[: short.start()])
            if before:
                yield before[-1] + short.group(1), number


def test_every_metric_the_docs_name_is_exported():
    # The chart's dashboard and alerts: tests/chart/test_chart_monitoring.py, on the rendered chart.
    exported = exported_names()
    unknown = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in DOCS
        for name, line in named_metrics(path)
        if name not in exported
    ]
    assert not unknown, "metrics named but not exported:\n" + "\n".join(unknown)


def test_every_exported_metric_is_documented():
    documented = {name for path in DOCS for name, _ in named_metrics(path)}
    families = exported_families()
    missing = [
        name
        for name, kind in sorted(families.items())
        if not ({name} | {name + s for s in SAMPLE_SUFFIXES.get(kind, ())}) & documented
    ]
    assert not missing, f"exported but named in no doc: {missing}"


def test_a_misspelt_metric_in_a_doc_is_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "| `lorafleet_agent_queue_depth`, `_running_request` | |\n"
        "See `lorafleet_agent.manager` and lorafleet_gateway_ttft_second_bucket.\n"
    )
    exported = exported_names()
    named = list(named_metrics(doc))
    assert ("lorafleet_agent_running_request", 1) in named  # the shorthand, expanded
    unknown = {name for name, _ in named if name not in exported}
    assert unknown == {"lorafleet_agent_running_request", "lorafleet_gateway_ttft_second_bucket"}


def test_every_recording_rule_the_docs_name_is_recorded_by_the_chart():
    recorded = {
        m.group(1)
        for path in CHART
        for m in re.finditer(r"record:\s*(lorafleet:[a-z0-9_:]+)", path.read_text())
    }
    assert recorded  # the chart records its cost and throughput series
    rule = re.compile(r"\blorafleet:[a-z0-9_]+:[a-z0-9_]+")
    named = {m.group(0) for path in DOCS for m in rule.finditer(path.read_text())}
    assert named, "the docs name the recording rules"
    assert named <= recorded, f"named but not recorded: {sorted(named - recorded)}"
