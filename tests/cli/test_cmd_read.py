"""Read commands (`adapter list|get`, `alias list|get|history`, `keys list|revoke`), their output
formats (table, wide, json, yaml: parsed back here) and exit codes, on a manifests folder and on
a Kubernetes API (kmock over real HTTP) through a kubeconfig, as a user runs them."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lorafleet_cli.main import main
from lorafleet_core.api.apikeys import TenantKeys
from lorafleet_core.storage.manifests import write_object
from lorafleet_core.version import version
from tests.manifest_folder import (
    adapter_manifest,
    alias_manifest,
    find_body,
    pool_hash,
    pool_manifest,
    reconcile_once,
)
from tests.operator import kmock_cluster
from tests.operator.kmock_cluster import Cluster

kmock_cluster.RESOURCES.setdefault("v1/secrets", ("Secret", True, set()))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def deployed(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """acme/support:prod deployed to v1, then v2; the folder target's arguments."""
    for v in ("v1", "v2"):
        write_object(folder, adapter_manifest(f"acme-support-{v}", "acme", pool_hash(folder)))
    m = ["--manifests", str(folder)]
    for v in ("v1", "v2"):
        assert main(["alias", "set", "acme/support:prod", f"acme-support-{v}", *m]) == 0
        reconcile_once(folder)  # the one writer of alias status, as a running `up` would
    return m


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"lorafleet {version()}"


def test_adapter_list_formats_parse(deployed, capsys):
    rc, out, _ = run(capsys, "adapter", "list", "-o", "json", *deployed)
    assert rc == 0
    assert [a["metadata"]["name"] for a in json.loads(out)] == [
        "acme-support-v1",
        "acme-support-v2",
    ]
    rc, out, _ = run(capsys, "adapter", "list", "-o", "yaml", "--tenant", "nobody", *deployed)
    assert (rc, yaml.safe_load(out)) == (0, [])
    rc, out, _ = run(capsys, "adapter", "list", *deployed)
    header, *rows = out.splitlines()
    assert header.split() == [
        "NAME",
        "READY",
        "TENANT",
        "VERSION",
        "RANK",
        "PHASE",
        "OWNERS",
        "AGE",
    ]
    assert rows[0].split()[:3] == ["acme-support-v1", "<none>", "acme"]
    rc, out, _ = run(capsys, "adapter", "list", "-o", "wide", *deployed)
    assert out.splitlines()[0].split()[-2:] == ["REASON", "MESSAGE"]


def test_adapter_get_and_a_missing_adapter(deployed, capsys):
    rc, out, _ = run(capsys, "adapter", "get", "acme-support-v2", "-o", "yaml", *deployed)
    assert rc == 0
    assert yaml.safe_load(out)["spec"]["tenant"] == "acme"
    rc, out, err = run(capsys, "adapter", "get", "acme-support-v9", *deployed)
    assert rc == 1  # a failure, not a usage error
    assert "LoRAAdapter 'acme-support-v9' not found" in err
    assert out == ""


def test_alias_list_and_get_show_what_serves(deployed, capsys):
    rc, out, _ = run(capsys, "alias", "list", "-o", "json", *deployed)
    assert rc == 0
    (alias,) = json.loads(out)
    assert alias["status"]["adapter"] == "acme-support-v2"
    assert alias["status"]["previousAdapter"] == "acme-support-v1"
    rc, out, _ = run(capsys, "alias", "get", "acme/support:prod", *deployed)
    header, row = out.splitlines()
    cells = dict(zip(header.split(), row.split(), strict=False))
    assert (cells["SERVING"], cells["PREVIOUS"]) == ("acme-support-v2", "acme-support-v1")
    rc, _, err = run(capsys, "alias", "get", "acme/nope:prod", *deployed)
    assert rc == 1
    assert "no AdapterAlias for 'acme/nope:prod'" in err


def test_alias_history_newest_first_with_the_serving_one_marked(deployed, capsys):
    rc, out, _ = run(capsys, "alias", "history", "acme/support:prod", "-o", "json", *deployed)
    assert rc == 0
    entries = json.loads(out)
    assert [(e["adapter"], e["serving"]) for e in entries] == [
        ("acme-support-v2", True),
        ("acme-support-v1", False),
    ]
    rc, out, _ = run(capsys, "alias", "history", "acme-support-prod", *deployed)
    lines = out.splitlines()
    assert lines[0].split() == ["ADAPTER", "DEPLOYED", "AGE", "SERVING"]
    assert lines[1].startswith("acme-support-v2")
    assert lines[1].rstrip().endswith("*")


def test_bad_output_format_is_a_usage_error(deployed, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["alias", "list", "-o", "xml", *deployed])
    assert exit_info.value.code == 2


def test_keys_list_and_revoke(folder, capsys, monkeypatch):
    m = ["--manifests", str(folder)]
    keys = []
    for _ in range(3):
        rc, out, _ = run(capsys, "keys", "create", "acme", *m)
        assert rc == 0
        keys.append(out.splitlines()[-1])
    rc, out, _ = run(capsys, "keys", "list", "-o", "json", *m)
    (row,) = json.loads(out)
    assert (row["tenant"], len(row["keyHashes"])) == ("acme", 3)
    assert not any(k in out for k in keys)  # hashes only, never a key
    first = row["keyHashes"][0]

    rc, out, _ = run(capsys, "keys", "revoke", "acme", first[7:19], *m)
    assert rc == 0
    assert "2 key(s) left" in out
    monkeypatch.setattr("sys.stdin", io.StringIO(keys[1] + "\n"))
    rc, out, _ = run(capsys, "keys", "revoke", "acme", "-", *m)
    assert rc == 0
    stored = TenantKeys.from_secret(find_body(folder, "Secret", "lorafleet-keys-acme"))
    assert len(stored.key_hashes) == 1
    assert first not in stored.key_hashes

    rc, _, err = run(capsys, "keys", "revoke", "acme", stored.key_hashes[0][7:], *m)
    assert rc == 1
    assert "last key" in err
    rc, _, err = run(capsys, "keys", "revoke", "acme", "xyz", *m)
    assert rc == 2
    assert "at least 8 hex digits" in err
    rc, _, err = run(capsys, "keys", "list", "globex", *m)
    assert rc == 1


# --- the same commands against a Kubernetes API -------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(namespace="cli-read")
    try:
        yield c
    finally:
        c.close()


def kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "k", "context": {"cluster": "kmock", "user": "u"}}],
        "current-context": "k",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_refused_deploy_on_a_cluster_shows_the_serving_adapter(
    cluster, tmp_path, base_model, capsys
):
    """The operator kept v1 serving after a deploy of a Rejected v2: list says so."""
    pool = pool_manifest("main", base_model)
    cluster.create(cluster.path("replicapools"), pool)
    for v in ("v1", "v2"):
        body = adapter_manifest(f"acme-web-{v}", "acme", pool["spec"]["baseModel"]["hash"])
        cluster.create(cluster.path("loraadapters"), body)
    alias = alias_manifest("acme-web-prod", "acme/web:prod", "acme-web-v2")
    alias["status"] = {
        "adapter": "acme-web-v1",
        "conditions": [
            {
                "type": "Deployed",
                "status": "False",
                "reason": "AdapterNotReady",
                "message": "LoRAAdapter acme-web-v2 is Rejected, not Ready; still serving "
                "acme-web-v1",
                "lastTransitionTime": "2026-11-29T12:00:00Z",
            },
        ],
        "history": [{"adapter": "acme-web-v1", "at": "2026-11-29T11:00:00Z"}],
    }
    cluster.create(cluster.path("adapteraliases"), alias)
    k = ["--cluster", "--kubeconfig", str(kubeconfig(tmp_path, cluster.url)), "-n", "cli-read"]

    rc, out, _ = run(capsys, "alias", "list", "-o", "wide", *k)
    assert rc == 0
    header, row = out.splitlines()
    assert header.split()[:8] == [
        "NAME", "READY", "MODEL", "SERVING", "SPLIT", "PREVIOUS", "DEPLOYED", "AGE"
    ]  # fmt: skip
    assert row.split()[3] == "acme-web-v1"  # SERVING: not spec.adapter
    assert "acme-web-v2" in row.split()  # WANTED, in -o wide
    assert "AdapterNotReady" in row
    rc, out, _ = run(capsys, "alias", "history", "acme/web:prod", "-o", "yaml", *k)
    assert yaml.safe_load(out)[0]["adapter"] == "acme-web-v1"
    rc, out, _ = run(capsys, "adapter", "list", "-o", "json", *k)
    assert {a["metadata"]["name"] for a in json.loads(out)} >= {"acme-web-v1", "acme-web-v2"}


def test_keys_on_a_cluster(cluster, tmp_path, capsys):
    k = ["--cluster", "--kubeconfig", str(kubeconfig(tmp_path, cluster.url)), "-n", "cli-read"]
    for _ in range(2):
        assert run(capsys, "keys", "create", "initech", *k)[0] == 0
    rc, out, _ = run(capsys, "keys", "list", "initech", "-o", "json", *k)
    assert rc == 0
    (row,) = json.loads(out)
    assert len(row["keyHashes"]) == 2
    rc, out, _ = run(capsys, "keys", "revoke", "initech", row["keyHashes"][1][7:20], *k)
    assert rc == 0
    rc, out, _ = run(capsys, "keys", "list", "initech", "-o", "json", *k)
    assert json.loads(out)[0]["keyHashes"] == row["keyHashes"][:1]
