"""Manifest folder reading/writing and the objects the cluster backend would send."""

from __future__ import annotations

import pytest
import yaml

from lorafleet_cli.main import main
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


def test_cluster_flags_in_a_folder_with_manifests_go_to_the_cluster_or_are_refused(
    tmp_path, monkeypatch, capsys
):
    # a folder where `make demo` ran: .lorafleet/manifests with an alias in it
    folder = tmp_path / ".lorafleet" / "manifests"
    folder.mkdir(parents=True)
    write_object(folder, alias_manifest("a", "acme/a:prod", "x"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LORAFLEET_MANIFESTS", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # without cluster flags: the folder
    assert main(["alias", "list"]) == 0
    assert "acme/a:prod" in capsys.readouterr().out
    # --context: the cluster (here a kubeconfig without that context), never the folder
    assert main(["alias", "list", "--context", "prod", "-n", "lorafleet"]) == 1
    out, err = capsys.readouterr()
    assert "acme/a:prod" not in out
    assert "prod" in err
    # alias set with those flags does not write the folder
    before = sorted(p.read_text() for p in folder.iterdir() if p.is_file())
    code = main(["alias", "set", "acme/b:prod", "b", "--context", "prod", "-n", "lorafleet"])
    assert code == 1
    assert sorted(p.read_text() for p in folder.iterdir() if p.is_file()) == before
    # a named folder and a cluster flag: refused, saying why
    assert main(["alias", "list", "--manifests", str(folder), "--context", "prod"]) == 2
    assert "--context names a cluster" in capsys.readouterr().err
