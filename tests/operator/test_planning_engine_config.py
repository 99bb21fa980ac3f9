"""What vLLM is launched with, in each place that launches it: the StatefulSet the operator
plans, standalone `lorafleet up`'s process, and the replica image (read, not built)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from lorafleet_core.api.crd_validation import schema_errors, schema_of
from lorafleet_core.api.models import EngineSpec, MergePhase, MergeStatus, ReplicaPool
from lorafleet_core.planning.pool import plan_pool_objects
from lorafleet_standalone import processes
from tests.operator.factories import pool, pool_body

TOOL_FLAGS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
MERGED = pool("m", merged={"adapter": "a"}, engine={"toolCallParser": "hermes"})
READY = MergeStatus(
    phase=MergePhase.READY, adapter_id="a", checksum="sha256:" + "2" * 64, uri="s3://b/m/x/"
)


def vllm_container(p: ReplicaPool, merge: MergeStatus | None = None) -> dict[str, Any]:
    sts = plan_pool_objects(p, "ns", 1, merge=merge).statefulset
    containers = sts["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "vllm")


def standalone_argv(p: ReplicaPool, tmp_path: Path) -> list[str]:
    replica = processes.ReplicaPlan("p-0", 7000, 7001, 7002, tmp_path)
    spec = processes.vllm_process(replica, Path("/m"), p.spec, cpu=False, log_dir=tmp_path)
    return list(spec.argv)


def contains_run(args: list[str], run: list[str]) -> bool:
    return any(args[i : i + len(run)] == run for i in range(len(args) - len(run) + 1))


def test_a_tool_call_parser_enables_forced_tool_calls_in_the_pod_and_in_standalone(tmp_path):
    shared = pool("p", engine={"toolCallParser": "hermes", "extraArgs": ["--seed", "1"]})
    args = vllm_container(shared)["args"]
    assert contains_run(args, TOOL_FLAGS)
    # extraArgs come last, so a pool that needs another spelling can still override.
    assert args.index("--tool-call-parser") < args.index("--seed")
    assert contains_run(standalone_argv(shared, tmp_path), TOOL_FLAGS)


def test_a_merged_pool_keeps_its_tool_call_parser():
    args = vllm_container(MERGED, READY)["args"]
    assert "--enable-lora" not in args
    assert contains_run(args, TOOL_FLAGS)


def test_without_a_parser_no_tool_flags_are_planned(tmp_path):
    plain = pool("p")
    for args in (vllm_container(plain)["args"], standalone_argv(plain, tmp_path)):
        assert "--tool-call-parser" not in args
        assert "--enable-auto-tool-choice" not in args


def test_every_parser_name_vllm_registers_is_accepted_by_the_model_and_the_crd():
    from vllm.tool_parsers import ToolParserManager

    registered = sorted(ToolParserManager.list_registered())
    assert {"hermes", "llama3_json", "pythonic"} <= set(registered)
    schema = schema_of("ReplicaPool")
    for name in registered:
        assert EngineSpec(tool_call_parser=name).tool_call_parser == name
        assert schema_errors(schema, pool_body("p", engine={"toolCallParser": name})) == []


@pytest.mark.parametrize("bad", ["", "--tool-call-parser", "hermes x", "a;b", "-h", "x" * 65])
def test_a_parser_name_that_could_be_another_flag_or_word_is_refused(bad):
    with pytest.raises(ValidationError):
        EngineSpec(tool_call_parser=bad)
    errors = schema_errors(schema_of("ReplicaPool"), pool_body("p", engine={"toolCallParser": bad}))
    assert errors, bad
    assert all(re.search("toolCallParser", e) for e in errors), errors
