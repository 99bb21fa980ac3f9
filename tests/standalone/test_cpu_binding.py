"""Each CPU engine of `lorafleet up` gets its own cores (cpu_binding), unless the user chose,
and runs its model in vLLM's engine-core process with a thread per core."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet_core.api.models import ReplicaPoolSpec
from lorafleet_standalone import processes
from lorafleet_standalone.cpu_binding import (
    BIND_ENV,
    EngineCores,
    cpu_list,
    engine_core_sets,
    parse_cpu_list,
)
from lorafleet_standalone.processes import INPROC_ENV, ReplicaPlan

POOL = ReplicaPoolSpec.model_validate(
    {"baseModel": {"name": "b", "hash": "sha256:" + "a" * 64, "uri": "file:///m"}}
)


def test_one_engine_keeps_the_last_core_free_like_vllms_auto() -> None:
    assert engine_core_sets([0, 1], 1) == [[0]]
    assert engine_core_sets(range(8), 1) == [[0, 1, 2, 3, 4, 5, 6]]


def test_two_engines_on_two_cores_get_one_core_each() -> None:
    assert engine_core_sets([0, 1], 2) == [[0], [1]]


def test_engines_split_all_but_the_last_core_evenly_when_cores_allow() -> None:
    assert engine_core_sets(range(9), 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert engine_core_sets(range(4), 2) == [[0], [1]]  # cores 2 and 3 for the rest
    assert engine_core_sets([2, 5, 7], 2) == [[2], [5]]  # an affinity mask, not 0..n-1


def test_more_engines_than_cores_go_round_robin() -> None:
    assert engine_core_sets([0, 1], 3) == [[0], [1], [0]]


def test_engines_are_handed_distinct_cores_and_later_ones_wrap_around() -> None:
    cores = EngineCores((0, 1, 2, 3, 4), expected=2)
    assert [cores.next(), cores.next(), cores.next()] == ["0-1", "2-3", "0-1"]
    assert "core(s) 4 for the rest" in cores.describe()


def test_a_users_binding_in_the_environment_wins(tmp_path: Path) -> None:
    cores = EngineCores.of_this_process(2, env={BIND_ENV: "auto"})
    assert cores.next() is None
    assert "auto" in cores.describe()
    replica = ReplicaPlan("p-0", 7000, 7001, 7002, tmp_path)
    spec = processes.vllm_process(
        replica, Path("/m"), POOL, cpu=True, omp_cpus=None, log_dir=tmp_path
    )
    assert BIND_ENV not in spec.env  # inherited from `up`'s environment as the user set it


def test_the_cpu_engine_runs_in_process_on_its_cores_and_a_gpu_engine_keeps_vllms_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (INPROC_ENV, "OMP_NUM_THREADS", BIND_ENV):
        monkeypatch.delenv(name, raising=False)
    replica = ReplicaPlan("p-0", 7000, 7001, 7002, tmp_path)
    cpu = processes.vllm_process(
        replica, Path("/m"), POOL, cpu=True, omp_cpus="1-3", log_dir=tmp_path
    )
    gpu = processes.vllm_process(
        replica, Path("/m"), POOL, cpu=False, omp_cpus="1-3", log_dir=tmp_path
    )
    assert cpu.cpus == frozenset({1, 2, 3})  # the whole engine, by affinity
    assert cpu.env[INPROC_ENV] == "0"
    assert cpu.env["OMP_NUM_THREADS"] == "3"  # a thread per core given, not one
    assert BIND_ENV not in cpu.env  # ignored in that mode
    assert gpu.cpus is None
    assert not {INPROC_ENV, "OMP_NUM_THREADS", BIND_ENV} & set(gpu.env)


def test_a_users_thread_count_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INPROC_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    replica = ReplicaPlan("p-0", 7000, 7001, 7002, tmp_path)
    spec = processes.vllm_process(
        replica, Path("/m"), POOL, cpu=True, omp_cpus="0-3", log_dir=tmp_path
    )
    assert "OMP_NUM_THREADS" not in spec.env  # inherited from `up`'s environment
    assert spec.cpus == frozenset({0, 1, 2, 3})


def test_a_users_worker_process_or_executor_keeps_vllms_thread_binding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replica = ReplicaPlan("p-0", 7000, 7001, 7002, tmp_path)
    monkeypatch.setenv(INPROC_ENV, "1")
    users = processes.vllm_process(
        replica, Path("/m"), POOL, cpu=True, omp_cpus="1", log_dir=tmp_path
    )
    monkeypatch.delenv(INPROC_ENV)
    pool = POOL.model_copy(deep=True)
    pool.engine.extra_args = ["--distributed-executor-backend=mp"]
    flagged = processes.vllm_process(
        replica, Path("/m"), pool, cpu=True, omp_cpus="1", log_dir=tmp_path
    )
    for spec in (users, flagged):
        assert spec.env[BIND_ENV] == "1"
        assert spec.cpus is None
        assert INPROC_ENV not in spec.env


def test_a_users_in_process_choice_still_gets_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INPROC_ENV, "0")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    replica = ReplicaPlan("p-0", 7000, 7001, 7002, tmp_path)
    spec = processes.vllm_process(
        replica, Path("/m"), POOL, cpu=True, omp_cpus="0,2", log_dir=tmp_path
    )
    assert spec.cpus == frozenset({0, 2})
    assert spec.env["OMP_NUM_THREADS"] == "2"


def test_cpu_lists_parse_to_core_ids() -> None:
    assert parse_cpu_list("0") == {0}
    assert parse_cpu_list("0-3,6") == {0, 1, 2, 3, 6}
    assert parse_cpu_list(cpu_list([1, 2, 5])) == {1, 2, 5}
