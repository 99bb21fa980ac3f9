"""Manifest folder reading/writing and the objects the cluster backend would send."""

from __future__ import annotations

import pytest
import yaml

from lorafleet_cli.targets import TargetError, apply_request
from lorafleet_core.storage.manifests import fingerprint, load_folder, write_object
from tests.manifest_folder import alias_manifest


def test_load_folder_multi_doc_bad_files_and_hidden(tmp_path):
    a = alias_manifest("a", "acme/a:prod", "x")
    b = alias_manifest("b", "acme/b:prod", "y")
    (tmp_path / "two.yaml").write_text(yaml.safe_dump_all([a, b]))
    (tmp_path / "broken.yaml").write_text("kind: [unclosed")
    (tmp_path / "notes.txt").write_text("kind: AdapterAlias")  # not a manifest suffix
    (tmp_path / ".lorafleet").mkdir()
    (tmp_path / ".lorafleet" / "status.json").write_text("{}")
    loaded = load_folder(tmp_path)
    assert sorted(o.name for o in loaded.objects) == ["a", "b"]
    assert [e.path.name for e in loaded.errors] == ["broken.yaml"]
    assert "cannot parse" in loaded.errors[0].message


def test_write_object_replaces_in_place_and_fingerprint_changes(tmp_path):
    a = alias_manifest("a", "acme/a:prod", "x")
    b = alias_manifest("b", "acme/b:prod", "y")
    (tmp_path / "two.yaml").write_text(yaml.safe_dump_all([a, b]))
    before = fingerprint(tmp_path)
    b["spec"]["adapter"] = "z"
    assert write_object(tmp_path, b) == tmp_path / "two.yaml"
    docs = list(yaml.safe_load_all((tmp_path / "two.yaml").read_text()))
    assert [d["spec"]["adapter"] for d in docs] == ["x", "z"]
    new = write_object(tmp_path, alias_manifest("c", "acme/c:prod", "w"))
    assert new.name == "adapteralias-c.yaml"
    assert fingerprint(tmp_path) != before


def test_apply_request_for_custom_resources_and_secrets():
    req = apply_request(alias_manifest("a", "acme/a:prod", "x"), "tenants")
    assert (req.group, req.version, req.plural, req.namespace, req.name) == (
        "lorafleet.dev",
        "v1alpha1",
        "adapteraliases",
        "tenants",
        "a",
    )
    assert req.body["metadata"]["namespace"] == "tenants"
    assert req.body["spec"]["adapter"] == "x"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k"}, "stringData": {}}
    sreq = apply_request(secret, "ns")
    assert (sreq.group, sreq.plural) == ("", "secrets")


def test_apply_request_refuses_other_kinds():
    with pytest.raises(TargetError, match="does not write Deployment"):
        apply_request(
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}, "n"
        )
    with pytest.raises(TargetError, match="must have apiVersion"):
        apply_request(
            {"apiVersion": "x/v1", "kind": "AdapterAlias", "metadata": {"name": "d"}}, "n"
        )
