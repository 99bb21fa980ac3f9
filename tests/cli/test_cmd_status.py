"""`lorafleet status` pieces that need no running system."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from lorafleet_cli.cmd_status import hit_rate, replica_lines, tier_hits
from lorafleet_cli.main import main
from lorafleet_core.wire.replica_state import ReplicaState


def test_hit_rate_from_the_agents_request_counter() -> None:
    reg = CollectorRegistry()
    c = Counter("lorafleet_agent_requests", "by tier", ["tier"], registry=reg)
    other = Counter("lorafleet_agent_adapter_loads", "by tier", ["tier"], registry=reg)
    c.labels("gpu").inc(6)
    c.labels("ram").inc(3)
    c.labels("remote").inc(1)
    other.labels("disk").inc(50)  # loads are not requests
    hits = tier_hits(generate_latest(reg).decode())
    assert hits == {"gpu": 6.0, "ram": 3.0, "remote": 1.0}
    assert hit_rate(hits) == "gpu 60%, ram 30%, disk 0%, remote 10%"
    assert hit_rate({}) == "-"


def test_replica_lines_show_load_tiers_and_failures() -> None:
    state = ReplicaState(
        replica_id="p-0",
        gpu_adapters=["a", "b"],
        ram_adapters=["c"],
        failed_adapters={"bad": "checksum mismatch"},
        queue_depth=4,
        evictions_per_min=1.5,
    )
    text = "\n".join(replica_lines(state, {"gpu": 1.0}))
    assert "p-0: queue 4" in text
    assert "evictions/min 1.5" in text
    assert "gpu 2, ram 1, disk 0, failed 1" in text
    assert "failed bad: checksum mismatch" in text


def test_status_without_standalone_state_or_cluster(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert main(["status", "--state-dir", str(tmp_path)]) == 1
    assert "no standalone state" in capsys.readouterr().err


def test_a_replica_whose_engine_is_down_says_so() -> None:
    state = ReplicaState(replica_id="p-1", engine_ready=False)
    assert "p-1: engine down (vLLM dead or hung), queue 0" in "\n".join(replica_lines(state, {}))
