"""What a ReplicaPool's spec.baseModel.uri means, read once (lorafleet_core.planning.base_model)
by every place that hands it on: vLLM's command line and env in the StatefulSet, the agent's
base model folder, the merge Job, `lorafleet adapter push` and standalone `lorafleet up`."""

from __future__ import annotations

import argparse
import functools
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from lorafleet_core.api.models import ReplicaPool
from lorafleet_core.planning.base_model import (
    STREAMER_LOAD_FORMAT,
    BaseModelKind,
    BaseModelSource,
    base_model_source,
)
from lorafleet_core.planning.merge_job import plan_merge_job
from lorafleet_core.planning.pool import plan_pool_objects
from lorafleet_core.wire.records import AdapterRecord
from tests.images.as_shipped import install_line
from tests.images.test_dockerfiles import REPLICA
from tests.operator.factories import BASE_HASH, pool

ROOT = Path(__file__).resolve().parents[2]
S3_MODEL = "s3://lorafleet-models/llama-2-7b/"


def with_uri(uri: str, **spec: Any) -> ReplicaPool:
    return pool("p", baseModel={"name": "m", "hash": BASE_HASH, "uri": uri}, **spec)


def containers(p: ReplicaPool) -> dict[str, dict[str, Any]]:
    sts = plan_pool_objects(p, "ns", 1).statefulset
    return {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


@functools.cache
def vllm_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser: argparse.ArgumentParser = make_arg_parser(FlexibleArgumentParser())
    return parser


def vllm_reads(args: list[str]) -> argparse.Namespace:
    """The installed vLLM's reading of the planned command line."""
    return vllm_parser().parse_args(args)


@pytest.mark.parametrize(
    ("uri", "kind", "location"),
    [
        ("file:///models/x", BaseModelKind.LOCAL, "/models/x"),
        ("file://localhost/models/x", BaseModelKind.LOCAL, "/models/x"),
        ("file:///models/with%20space", BaseModelKind.LOCAL, "/models/with space"),
        ("/models/x", BaseModelKind.LOCAL, "/models/x"),
        (S3_MODEL, BaseModelKind.OBJECT_STORE, S3_MODEL),
        ("meta-llama/Llama-2-7b-hf", BaseModelKind.HUB, "meta-llama/Llama-2-7b-hf"),
        ("file://otherhost/models/x", BaseModelKind.HUB, "file://otherhost/models/x"),
    ],
)
def test_what_a_base_model_uri_names(uri: str, kind: BaseModelKind, location: str) -> None:
    assert base_model_source(uri) == BaseModelSource(kind, location)


def test_a_file_uri_runs_vllm_on_the_folder_and_gives_the_agent_its_config() -> None:
    """Before: `--model file:///models/x` (vLLM takes it for a hub id) and no base model
    folder for the agent's shape checks."""
    c = containers(with_uri("file:///models/x"))
    seen = vllm_reads(c["vllm"]["args"])
    assert seen.model == "/models/x"
    assert seen.load_format == "auto"
    assert env_of(c["agent"])["LORAFLEET_AGENT_BASE_MODEL_DIR"]["value"] == "/models/x"
    assert not {n for n in env_of(c["vllm"]) if n.startswith("AWS_")}


def test_a_hub_id_reaches_vllm_as_it_is_and_the_agent_has_no_folder() -> None:
    c = containers(with_uri("meta-llama/Llama-2-7b-hf"))
    assert vllm_reads(c["vllm"]["args"]).model == "meta-llama/Llama-2-7b-hf"
    assert "LORAFLEET_AGENT_BASE_MODEL_DIR" not in env_of(c["agent"])


def test_an_s3_base_model_is_streamed_with_the_s3_settings_under_the_names_vllm_reads() -> None:
    from vllm.transformers_utils.runai_utils import is_runai_obj_uri

    secret = {"secretKeyRef": {"name": "lorafleet-s3", "key": "secret"}}
    p = with_uri(
        S3_MODEL,
        template={
            "env": [
                {"name": "LORAFLEET_AGENT_S3_ENDPOINT_URL", "value": "http://minio.storage:9000"},
                {"name": "LORAFLEET_AGENT_S3_REGION", "value": "eu-west-1"},
                {"name": "LORAFLEET_AGENT_S3_SECRET_ACCESS_KEY", "valueFrom": secret},
            ]
        },
    )
    c = containers(p)
    seen = vllm_reads(c["vllm"]["args"])
    assert (seen.model, seen.load_format) == (S3_MODEL, STREAMER_LOAD_FORMAT)
    assert is_runai_obj_uri(seen.model)  # vLLM pulls config and tokenizer from it
    env = env_of(c["vllm"])
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.storage:9000"
    assert env["AWS_DEFAULT_REGION"]["value"] == "eu-west-1"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == secret  # never copied as a literal
    assert "AWS_ACCESS_KEY_ID" not in env  # not in the template: the credential chain (IRSA)
    assert env["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"]["value"] == "0"
    # The agent reads its own names; nothing is added to its container.
    assert not {n for n in env_of(c["agent"]) if n.startswith(("AWS_", "RUNAI_"))}
    assert "LORAFLEET_AGENT_BASE_MODEL_DIR" not in env_of(c["agent"])


def test_the_templates_own_aws_settings_win_and_aws_s3_needs_no_endpoint() -> None:
    p = with_uri(
        S3_MODEL,
        template={
            "env": [
                {"name": "LORAFLEET_AGENT_S3_REGION", "value": "eu-west-1"},
                {"name": "AWS_DEFAULT_REGION", "value": "us-west-2"},
            ]
        },
    )
    env = containers(p)["vllm"]["env"]
    assert [e["value"] for e in env if e["name"] == "AWS_DEFAULT_REGION"] == ["us-west-2"]
    # AWS S3 itself: virtual-host addressing, the streamer's default.
    assert "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING" not in {e["name"] for e in env}


def test_the_merge_job_reads_a_local_base_model_where_it_is() -> None:
    record = AdapterRecord(
        id="a",
        tenant="t",
        base_model_hash=BASE_HASH,
        rank=8,
        alpha=16,
        target_modules=("q_proj",),
        weights_uri="s3://adapters/t/a/",
        checksum="sha256:" + "1" * 64,
    )
    for uri, given in (("file:///models/x", "/models/x"), (S3_MODEL, S3_MODEL)):
        job = plan_merge_job(with_uri(uri, merged={"adapter": "a"}), record, "ns", "s3://b/m")
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--base-model") + 1] == given


def test_the_cli_and_standalone_read_the_uri_as_the_operator_does(tmp_path: Path) -> None:
    from lorafleet_cli.cmd_adapter import local_model_dir
    from lorafleet_standalone.guards import UpError
    from lorafleet_standalone.up_options import model_dir_of

    (tmp_path / "config.json").write_text("{}")
    for uri in (f"file://{tmp_path}", str(tmp_path)):
        assert local_model_dir(uri) == tmp_path
        assert model_dir_of(uri) == tmp_path
    for uri in (S3_MODEL, "meta-llama/Llama-2-7b-hf"):
        assert local_model_dir(uri) is None
        with pytest.raises(UpError, match="pass --model DIR"):
            model_dir_of(uri)


def test_the_replica_image_installs_the_streamer_vllm_needs_for_s3() -> None:
    """vLLM names runai-model-streamer only in its optional `runai` extra: the image's own
    install line must bring it (and its S3 backend)."""
    extras = re.search(r"\[([\w,-]+)\]$", install_line(REPLICA).requirement())
    assert extras is not None
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    reqs = [Requirement(r) for e in extras.group(1).split(",") for r in optional[e]]
    assert any(r.name == "runai-model-streamer" and "s3" in r.extras for r in reqs), reqs
