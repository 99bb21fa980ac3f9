"""The pure parts of the canary probe: markers and tallies (the load test's are in
tests/loadtest/test_loadtest_units.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lorafleet_loadtest.probe import canary as canary_probe
from lorafleet_loadtest.probe.markers import markers_from_manifests, parse_marker_args
from lorafleet_loadtest.probe.results import RequestResult, marker_matches


def ok_result(i: int, ttft: float, tier: str, *, marker_ok: bool | None = True) -> RequestResult:
    return RequestResult(
        i, "a", float(i), float(i), "200", ttft_s=ttft, total_s=ttft + 0.1,
        completion_tokens=5, tier=tier, replica="r0", adapter_id="a-v1", text="ZEBRA-7",
        marker_ok=marker_ok,
    )  # fmt: skip


def test_marker_checks_and_arguments():
    assert marker_matches("ZEBRA-7 ZEBRA", "ZEBRA-7") is True
    assert marker_matches("OTTER-9", "ZEBRA-7") is False
    assert marker_matches("anything", None) is None
    assert marker_matches("ZE", "ZEBRA-7") is False
    assert marker_matches("ZE", "ZEBRA-7", truncated=True) is True  # cut by max_tokens
    assert marker_matches("OT", "ZEBRA-7", truncated=True) is False
    assert marker_matches("", "ZEBRA-7", truncated=True) is False
    assert parse_marker_args(["demo/zebra:prod=ZEBRA-7"]) == {"demo/zebra:prod": "ZEBRA-7"}
    with pytest.raises(ValueError, match="alias=MARKER"):
        parse_marker_args(["demo/zebra:prod"])


def test_markers_from_demo_style_manifests(tmp_path: Path):
    def adapter(name: str, label: str | None, annotation: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "labels": {}}
        if label:
            meta["labels"]["lorafleet.dev/adapter-name"] = label
        if annotation:
            meta["annotations"] = {"lorafleet.dev/canary-marker": annotation}
        return {"kind": "LoRAAdapter", "metadata": meta, "spec": {}}

    def alias(model: str, target: str) -> dict[str, Any]:
        name = model.replace("/", "-").replace(":", "-")
        return {"kind": "AdapterAlias", "metadata": {"name": name},
                "spec": {"model": model, "adapter": target}}  # fmt: skip

    docs = [
        adapter("demo-zebra-v1", "zebra"),
        adapter("demo-zebra-v2", "zebra"),
        adapter("acme-bot-v1", None, "ACME-1"),
        adapter("x-unknown-v1", "unknown"),
        alias("demo/zebra:prod", "demo-zebra-v1"),
        alias("acme/bot:prod", "acme-bot-v1"),
        alias("x/u:prod", "x-unknown-v1"),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "otter.yaml").write_text(
        yaml.safe_dump({"kind": "List", "items": [adapter("demo-otter-v1", "otter"),
                                                  alias("demo/o:prod", "demo-otter-v1")]})
    )  # fmt: skip
    found = markers_from_manifests(tmp_path)
    assert found == {"demo/zebra:prod": "ZEBRA-7", "acme/bot:prod": "ACME-1",
                     "demo/o:prod": "OTTER-9"}  # fmt: skip
    # The reconciler's alias status says what serves: that adapter's marker is expected.
    (tmp_path / ".lorafleet").mkdir()
    (tmp_path / ".lorafleet" / "alias-status.json").write_text(
        '{"demo-zebra-prod": {"adapter": "demo-otter-v1"}}'
    )
    assert markers_from_manifests(tmp_path)["demo/zebra:prod"] == "OTTER-9"


def test_canary_tally_reports_switches_and_verdict():
    tally = canary_probe.AliasTally()
    first = ok_result(0, 0.03, "gpu")
    assert canary_probe.record(tally, first) is None
    moved = ok_result(1, 0.05, "remote")
    moved.adapter_id = "a-v2"
    assert canary_probe.record(tally, moved) == "SWITCH a: a-v1 -> a-v2"
    wrong = ok_result(2, 0.05, "gpu", marker_ok=False)
    assert canary_probe.record(tally, wrong) == "SWITCH a: a-v2 -> a-v1"
    assert canary_probe.record(tally, RequestResult(3, "a", 0, 0, "503")) is None
    assert (tally.hits, tally.misses, tally.errors, tally.switches) == (2, 1, 1, 2)
    assert tally.tiers == {"gpu": 2, "remote": 1}
    assert canary_probe.verdict({"a": tally}, 1.0) == 1  # a wrong marker
    tally.misses = 0
    assert canary_probe.verdict({"a": tally}, 0.5) == 0
    assert canary_probe.verdict({"a": tally}, 0.1) == 1  # 1 error in 4 probes
    report = canary_probe.format_report({"a": tally})
    assert "a-v1 -> a-v2 -> a-v1 (2)" in report
