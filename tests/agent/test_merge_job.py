"""The merge step against moto S3: verified adapter in, merged weights at a content-addressed
prefix out, with a checksum that catches any change to the stored files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lorafleet_agent.merge_job import MergeError, MergeResult, _local_base, main, run_merge
from lorafleet_agent.object_store import ObjectStore, ObjectStoreConfig
from lorafleet_core.api import reasons
from lorafleet_core.storage.merged_weights import (
    MergedChecksumError,
    merged_checksum,
    verify_merged,
)
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from tests.conftest import S3Server
from tests.log_lines import json_lines

RecordFactory = Callable[..., AdapterRecord]


def store_of(s3: S3Server) -> ObjectStore:
    return ObjectStore(
        ObjectStoreConfig(s3.endpoint_url, s3.region, s3.access_key_id, s3.secret_access_key)
    )


def merge(record: AdapterRecord, assets: DemoAssets, s3: S3Server, work: Path) -> MergeResult:
    return run_merge(
        record,
        base_model=str(assets.base_model),
        pool_base_hash=assets.base_model_hash,
        store_prefix=f"s3://{s3.bucket}/lorafleet-merged",
        store=store_of(s3),
        work_dir=work,
    )


@pytest.fixture(scope="module")
def merged(
    demo_assets: DemoAssets,
    s3_server: S3Server,
    make_record: RecordFactory,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[AdapterRecord, Path, str, str]:
    """zebra merged once for the module: (record, downloaded folder, checksum, uri)."""
    record = make_record("zebra", "zebra-merge-1")
    work = tmp_path_factory.mktemp("merge")
    result = merge(record, demo_assets, s3_server, work)
    dest = work / "fetched"
    dest.mkdir()
    store_of(s3_server).fetch_folder(result.uri, dest)
    return record, dest, result.checksum, result.uri


def test_merged_weights_land_under_their_checksum_and_verify(merged, s3_server: S3Server):
    _, folder, checksum, uri = merged
    assert uri == f"s3://{s3_server.bucket}/lorafleet-merged/{checksum.removeprefix('sha256:')}/"
    assert merged_checksum(folder) == checksum
    verify_merged(folder, checksum)  # raises on a mismatch
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not any(n.startswith("adapter_") for n in names)  # a plain model, no LoRA files


def test_merged_weights_are_base_plus_scaled_lora_delta(merged, demo_assets: DemoAssets):
    """W' = W + (alpha / r) * B @ A for a projection the adapter targets."""
    import torch
    from safetensors.torch import load_file

    record, folder, _, _ = merged
    base = load_file(demo_assets.base_model / "model.safetensors")
    out = load_file(folder / "model.safetensors")
    lora = load_file(demo_assets.adapters["zebra"] / "adapter_model.safetensors")
    key = "model.layers.0.self_attn.q_proj.weight"
    a = next(v for k, v in lora.items() if "layers.0." in k and "q_proj.lora_A" in k)
    b = next(v for k, v in lora.items() if "layers.0." in k and "q_proj.lora_B" in k)
    expected = base[key] + (record.alpha / record.rank) * (b @ a)
    assert not torch.allclose(out[key], base[key])  # the adapter changed the weights
    assert torch.allclose(out[key], expected, atol=1e-5)


def test_a_stored_file_changed_after_the_merge_fails_verification(merged, tmp_path: Path):
    _, folder, checksum, _ = merged
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("}", " }", 1))
    with pytest.raises(MergedChecksumError, match="hash to"):
        verify_merged(copy, checksum)
    (copy / "config.json").write_bytes((folder / "config.json").read_bytes())
    (copy / "extra.bin").write_bytes(b"x")  # an added file changes the checksum too
    with pytest.raises(MergedChecksumError):
        verify_merged(copy, checksum)


def test_an_adapter_whose_files_do_not_match_the_record_is_not_merged(
    demo_assets: DemoAssets, s3_server: S3Server, make_record: RecordFactory, tmp_path: Path
):
    record = make_record("zebra", "zebra-bad", checksum="sha256:" + "0" * 64)
    with pytest.raises(MergeError) as exc:
        merge(record, demo_assets, s3_server, tmp_path)
    assert exc.value.reason == reasons.CHECKSUM_MISMATCH
    listed = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix="lorafleet-merged/")
    stored = {o["Key"].split("/")[1] for o in listed.get("Contents", [])}
    assert "0" * 64 not in stored


def test_an_adapter_for_another_base_model_is_refused_before_any_download(
    demo_assets: DemoAssets, s3_server: S3Server, make_record: RecordFactory, tmp_path: Path
):
    record = make_record("zebra", "zebra-other-base", base_model_hash="sha256:" + "a" * 64)
    with pytest.raises(MergeError) as exc:
        merge(record, demo_assets, s3_server, tmp_path)
    assert exc.value.reason == reasons.BASE_MODEL_MISMATCH


def test_the_command_reports_a_refusal_as_json_with_its_reason(
    demo_assets: DemoAssets,
    s3_server: S3Server,
    make_record: RecordFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    for key, value in s3_server.env().items():  # the store settings replicas use
        monkeypatch.setenv(key, value)
    record = make_record("zebra", "zebra-cli", checksum="sha256:" + "1" * 64)
    result = tmp_path / "result.json"
    code = main(
        [
            "--record",
            record.model_dump_json(),
            "--base-model",
            str(demo_assets.base_model),
            "--base-model-hash",
            demo_assets.base_model_hash,
            "--store-prefix",
            f"file://{tmp_path / 'merged'}",
            "--work-dir",
            str(tmp_path / "work"),
            "--result-file",
            str(result),
        ]
    )
    assert code == 2
    assert json.loads(result.read_text())["reason"] == reasons.CHECKSUM_MISMATCH


def test_the_merge_step_and_the_merged_weights_fetch_write_only_log_lines(
    demo_assets: DemoAssets, s3_server: S3Server, make_record: RecordFactory, tmp_path: Path
):
    """Both commands as the Job and the init container run them: every line they write is one
    JSON log line (before: Python's `INFO:name:message` and bare prints beside the agent's JSON),
    and the merge step's report is still the termination message the operator parses."""
    env = {**os.environ, **s3_server.env()}
    env.pop("LORAFLEET_LOG_FORMAT", None)  # the default, as the pod has it
    record = make_record("zebra", "zebra-logs", checksum="sha256:" + "1" * 64)
    result = tmp_path / "result.json"
    merge = subprocess.run(
        [
            sys.executable, "-m", "lorafleet_agent.merge_job",
            "--record", record.model_dump_json(),
            "--base-model", str(demo_assets.base_model),
            "--base-model-hash", demo_assets.base_model_hash,
            "--store-prefix", f"file://{tmp_path / 'merged'}",
            "--work-dir", str(tmp_path / "work"),
            "--result-file", str(result),
        ],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert merge.returncode == 2, merge.stderr
    assert merge.stdout == ""
    lines = json_lines(merge.stderr)
    reports = [d for d in lines if d["message"].startswith("merge report: ")]
    assert len(reports) == 1, lines
    assert json.loads(reports[0]["message"].removeprefix("merge report: ")) == json.loads(
        result.read_text()
    )
    assert json.loads(result.read_text())["reason"] == reasons.CHECKSUM_MISMATCH

    fetch = subprocess.run(
        [
            sys.executable, "-m", "lorafleet_agent.merged_model",
            "--uri", f"file://{tmp_path / 'nothing-here'}",
            "--checksum", "sha256:" + "2" * 64,
            "--dest", str(tmp_path / "dest"),
        ],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert fetch.returncode == 2, fetch.stderr
    assert fetch.stdout == ""
    refused = [d for d in json_lines(fetch.stderr) if d["level"] == "ERROR"]
    assert [d["message"].split(":")[0] for d in refused] == ["merged weights refused"]


def test_a_local_base_model_is_read_in_place_and_a_hub_id_is_refused(tmp_path: Path):
    """file:///p is the folder /p (before: copied through the object store into the work
    volume); a hub id cannot be hashed against the pool's baseModel.hash."""
    store = ObjectStore(ObjectStoreConfig())
    work = tmp_path / "work"
    work.mkdir()
    assert _local_base(f"file://{tmp_path}", store, work) == tmp_path
    assert _local_base(str(tmp_path), store, work) == tmp_path
    assert list(work.iterdir()) == []
    with pytest.raises(MergeError, match="neither a folder nor an s3:// prefix"):
        _local_base("meta-llama/Llama-2-7b-hf", store, work)
