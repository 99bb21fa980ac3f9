"""`lorafleet adapter push`: inspect, refuse what the pool rejects, upload, write the object."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml
from moto.server import ThreadedMotoServer

from lorafleet_cli.main import main
from lorafleet_core.api.models import LoRAAdapter
from lorafleet_core.storage.adapter_files import adapter_checksum
from lorafleet_core.storage.manifests import load_folder, write_object
from tests.manifest_folder import make_adapter


def _push(folder: Path, adapter: Path, tmp_path: Path, *extra: str) -> int:
    return main(
        [
            "adapter", "push", str(adapter),
            "--tenant", "acme", "--name", "support", "--version", "v1", "--pool", "main",
            "--manifests", str(folder), "--store", f"file://{tmp_path / 'store'}", "--quiet",
            *extra,
        ]
    )  # fmt: skip


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto S3 server of this test's own (its URL), and credentials for boto3 to sign with."""
    for k, v in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_push_uploads_and_writes_adapter(folder, tmp_path, capsys):
    adapter = make_adapter(tmp_path / "ad", rank=4)
    assert _push(folder, adapter, tmp_path) == 0
    written = folder / "loraadapter-acme-support-v1.yaml"
    obj = LoRAAdapter.model_validate(yaml.safe_load(written.read_text()))
    assert obj.spec.rank == 4
    assert obj.spec.target_modules == ["q_proj", "v_proj"]
    assert obj.spec.checksum == adapter_checksum(adapter)
    assert obj.spec.weights_uri == f"file://{tmp_path / 'store'}/acme/support/v1/"
    uploaded = tmp_path / "store" / "acme" / "support" / "v1"
    # Exactly the two files a replica loads; the checksum holds over the uploaded copy.
    assert sorted(p.name for p in uploaded.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert adapter_checksum(uploaded) == obj.spec.checksum
    assert "lorafleet alias set acme/support:prod acme-support-v1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "extra", "expected"),
    [
        ({"rank": 16}, (), "RankTooHigh: rank 16 exceeds ReplicaPool main maxRank 8"),
        ({"modules": ("q_proj", "lm_head")}, (), "TargetModulesNotAllowed"),
        ({"wrong_shape": True}, (), "expected [4, 64]"),
        ({}, ("--base-model-hash", "sha256:" + "b" * 64), "BaseModelMismatch"),
    ],
    ids=["rank-too-high", "module-not-allowed", "bad-shapes", "wrong-base-model"],
)
def test_push_refuses_what_the_pool_rejects(folder, tmp_path, capsys, kwargs, extra, expected):
    adapter = make_adapter(tmp_path / "ad", **kwargs)
    assert _push(folder, adapter, tmp_path, *extra) == 1
    err = capsys.readouterr().err
    assert "pool 'main' would reject" in err
    assert expected in err
    # Refused before anything moved: no upload, no object.
    assert not (tmp_path / "store").exists()
    assert load_folder(folder).of_kind("LoRAAdapter") == []


def test_push_refuses_a_folder_that_is_not_an_adapter(folder, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert _push(folder, tmp_path / "empty", tmp_path) == 1
    assert "missing adapter_config.json" in capsys.readouterr().err


def test_push_refuses_to_change_an_existing_version(folder, tmp_path, capsys):
    assert _push(folder, make_adapter(tmp_path / "a1", seed=1), tmp_path) == 0
    assert _push(folder, make_adapter(tmp_path / "a2", seed=2), tmp_path) == 1
    assert "versions are immutable" in capsys.readouterr().err


def test_push_unknown_pool(folder, tmp_path, capsys):
    adapter = make_adapter(tmp_path / "ad")
    rc = main(
        ["adapter", "push", str(adapter), "--tenant", "acme", "--name", "x", "--version", "v1",
         "--pool", "nope", "--manifests", str(folder), "--quiet"]
    )  # fmt: skip
    assert rc == 1  # a failure, not a usage error
    assert "ReplicaPool 'nope' not found" in capsys.readouterr().err


def test_push_to_s3(folder, tmp_path, s3_endpoint):
    """The real S3 protocol (moto's server) through boto3, with SHA256 checksums stored."""
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="adapters")
    adapter = make_adapter(tmp_path / "ad")
    rc = _push(
        folder,
        adapter,
        tmp_path,
        "--store",
        "s3://adapters/fleet",
        "--s3-endpoint-url",
        s3_endpoint,
    )
    assert rc == 0
    obj = LoRAAdapter.model_validate(
        yaml.safe_load((folder / "loraadapter-acme-support-v1.yaml").read_text())
    )
    assert obj.spec.weights_uri == "s3://adapters/fleet/acme/support/v1/"
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="adapters")["Contents"])
    assert keys == [
        "fleet/acme/support/v1/adapter_config.json",
        "fleet/acme/support/v1/adapter_model.safetensors",
    ]
    body = s3.get_object(Bucket="adapters", Key="fleet/acme/support/v1/adapter_model.safetensors")[
        "Body"
    ].read()
    assert body == (adapter / "adapter_model.safetensors").read_bytes()


def _other_target(folder: Path, tmp_path: Path) -> Path:
    """A second manifests folder (another namespace, say) with the same pool and store."""
    other = tmp_path / "other-manifests"
    shutil.copytree(folder, other)
    return other


def test_push_never_changes_files_another_target_serves(folder, tmp_path, capsys):
    assert _push(folder, make_adapter(tmp_path / "a1", seed=1), tmp_path) == 0
    uploaded = tmp_path / "store" / "acme" / "support" / "v1"
    served = adapter_checksum(uploaded)
    other = _other_target(folder, tmp_path)
    for p in other.glob("loraadapter-*"):
        p.unlink()  # the other target has no such LoRAAdapter: only the store knows
    assert _push(other, make_adapter(tmp_path / "a2", seed=2), tmp_path) == 1
    err = capsys.readouterr().err
    assert "already holds other weights" in err, err
    assert adapter_checksum(uploaded) == served  # untouched
    assert load_folder(other).of_kind("LoRAAdapter") == []
    # The same weights again are fine (nothing uploaded twice).
    assert _push(other, make_adapter(tmp_path / "a3", seed=1), tmp_path) == 0


def test_push_to_s3_never_changes_stored_weights(folder, tmp_path, s3_endpoint, capsys):
    # moto keeps buckets process-wide (across servers): a bucket of this test's own.
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="shared-store")
    s3_args = ("--store", "s3://shared-store/fleet", "--s3-endpoint-url", s3_endpoint)
    assert _push(folder, make_adapter(tmp_path / "a1", seed=1), tmp_path, *s3_args) == 0
    other = _other_target(folder, tmp_path)
    for p in other.glob("loraadapter-*"):
        p.unlink()
    assert _push(other, make_adapter(tmp_path / "a2", seed=2), tmp_path, *s3_args) == 1
    assert "already holds other weights" in capsys.readouterr().err
    key = "fleet/acme/support/v1/adapter_model.safetensors"
    body = boto3.client("s3", endpoint_url=s3_endpoint).get_object(Bucket="shared-store", Key=key)
    assert body["Body"].read() == (tmp_path / "a1" / "adapter_model.safetensors").read_bytes()


def test_push_outside_the_pools_adapter_sources_is_refused_before_uploading(
    folder, tmp_path, base_model, capsys
):
    from tests.manifest_folder import pool_manifest

    body = pool_manifest("main", base_model)
    body["spec"]["adapterSources"] = [f"file://{tmp_path / 'fleet-store'}"]
    write_object(folder, body)
    adapter = make_adapter(tmp_path / "ad")
    assert _push(folder, adapter, tmp_path) == 1  # --store is tmp_path/store: elsewhere
    err = capsys.readouterr().err
    assert "WeightsOutsideSources" in err, err
    assert not (tmp_path / "store").exists()
    fleet_store = ("--store", f"file://{tmp_path / 'fleet-store'}")
    assert _push(folder, adapter, tmp_path, *fleet_store) == 0


@pytest.mark.parametrize(
    ("option", "value"),
    [
        # Each of these names pushed and wrote an adapter that no alias could then name
        # (acme/sup port:prod is not a model name; a label value holds at most 63 characters).
        ("--name", "sup port"),
        ("--name", "Support"),
        ("--name", "s" * 64),
        ("--name", "../../x"),
        ("--name", "sup\u00e9rieur"),
        ("--tenant", "../../etc"),
        ("--version", "v1/../../.."),
    ],
)
def test_push_refuses_names_no_model_name_or_label_can_hold_before_uploading(
    folder, tmp_path, capsys, option, value
):
    adapter = make_adapter(tmp_path / "ad", rank=4)
    args = {"--tenant": "acme", "--name": "support", "--version": "v1"} | {option: value}
    rc = main(
        [
            "adapter", "push", str(adapter), *[x for kv in args.items() for x in kv],
            "--pool", "main", "--manifests", str(folder),
            "--store", f"file://{tmp_path / 'store'}", "--quiet",
        ]
    )  # fmt: skip
    assert rc == 2  # the command line is wrong (docs/reference/cli.md)
    assert option in capsys.readouterr().err  # names what to change
    assert not (tmp_path / "store").exists()
    assert load_folder(folder).of_kind("LoRAAdapter") == []
