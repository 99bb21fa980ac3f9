"""`lorafleet up` failures that must be clear and leave nothing running (no vLLM needed)."""

from __future__ import annotations

import dataclasses
import fcntl
import socket
from pathlib import Path

import pytest

from lorafleet_cli.main import main
from lorafleet_core.storage.manifests import write_object
from lorafleet_standalone.guards import UpError
from lorafleet_standalone.local_replicas import plan_replicas
from lorafleet_standalone.runner import run_up
from lorafleet_standalone.up_options import UpOptions, model_dir_of
from tests.manifest_folder import pool_manifest


def _opts(state: Path, manifests: Path) -> UpOptions:
    return UpOptions(
        state_dir=state,
        manifests_dir=manifests,
        replicas=1,
        port=0,
        internal_port=0,
        model=None,
        pool=None,
    )


def test_folder_without_a_pool_is_refused_clearly(tmp_path: Path, capsys) -> None:
    (tmp_path / "m").mkdir()
    assert run_up(_opts(tmp_path / "s", tmp_path / "m")) == 1
    out = capsys.readouterr().out
    assert "needs one valid ReplicaPool" in out
    assert "no ReplicaPool found" in out


def test_pool_whose_model_is_missing_is_refused(tmp_path: Path, base_model: Path, capsys) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    body = pool_manifest("p", base_model)
    body["spec"]["baseModel"]["uri"] = f"file://{tmp_path / 'nowhere'}"
    write_object(folder, body)
    assert run_up(_opts(tmp_path / "s", folder)) == 1
    assert "config.json missing); pass --model DIR" in capsys.readouterr().out


def test_one_up_per_state_folder(tmp_path: Path, capsys) -> None:
    state = tmp_path / "s"
    state.mkdir()
    (tmp_path / "m").mkdir()
    with (state / "up.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert run_up(_opts(state, tmp_path / "m")) == 1
    assert "another `lorafleet up` is running" in capsys.readouterr().out


def test_missing_manifests_folder(tmp_path: Path, capsys) -> None:
    rc = main(["up", "--manifests", str(tmp_path / "absent"), "--state-dir", str(tmp_path)])
    assert rc == 2
    assert "is not a folder" in capsys.readouterr().out


def test_replica_plans_are_named_like_pods_with_distinct_ports(tmp_path: Path) -> None:
    plans = plan_replicas(tmp_path, "pool", 3)
    assert [p.id for p in plans] == ["pool-0", "pool-1", "pool-2"]
    ports = [port for p in plans for port in (p.vllm_port, p.data_port, p.internal_port)]
    assert len(set(ports)) == len(ports)
    assert plans[1].annotations_file == tmp_path / "replicas" / "pool-1" / "annotations"


def test_remote_base_model_needs_model_flag() -> None:
    assert model_dir_of("file:///models/base") == Path("/models/base")
    with pytest.raises(UpError, match="pass --model DIR"):
        model_dir_of("s3://bucket/base")


def test_a_port_in_use_is_refused_before_anything_starts(
    tmp_path: Path, base_model: Path, capsys
) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    write_object(folder, pool_manifest("p", base_model))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        opts = dataclasses.replace(_opts(tmp_path / "s", folder), port=port)
        assert run_up(opts) == 1
    out = capsys.readouterr().out
    assert f"gateway port {port} on 127.0.0.1 is in use" in out, out
    assert "starting" not in out  # no vLLM was started
    assert not (tmp_path / "s" / "replicas").exists()


def test_a_second_demo_up_in_a_running_state_folder_touches_nothing(tmp_path: Path, capsys) -> None:
    state = tmp_path / "s"
    state.mkdir()
    with (state / "up.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["up", "--state-dir", str(state), "--quiet"]) == 1
    assert "another `lorafleet up` is running" in capsys.readouterr().out
    assert sorted(p.name for p in state.iterdir()) == ["up.lock"]  # no demo built over it


@pytest.mark.parametrize(
    "argv", [["--replicas", "0"], ["--replicas", "-2"], ["--port", "70000"], ["--port", "-1"]]
)
def test_nonsense_numbers_are_refused_on_the_command_line(tmp_path: Path, argv, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["up", "--state-dir", str(tmp_path), *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "must be at least 1" in err or "a port is 0-65535" in err, err


def test_a_second_up_on_the_same_manifests_folder_is_refused(
    tmp_path: Path, base_model: Path, capsys
) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    write_object(folder, pool_manifest("p", base_model))
    (folder / ".lorafleet").mkdir(exist_ok=True)  # the writes' lock file may have made it
    with (folder / ".lorafleet" / "up.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert run_up(_opts(tmp_path / "other-state", folder)) == 1
    out = capsys.readouterr().out
    assert "another `lorafleet up` (another state folder) serves the manifests" in out, out
    assert not (tmp_path / "other-state" / "replicas").exists()
