"""`lorafleet alias set/rollback` and `lorafleet keys create` against a manifests folder.

The CLI writes only manifests; the standalone reconciler (what `lorafleet up` runs) is the one
writer of alias status, so these tests run a real Reconciler pass where `up` would have.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lorafleet_cli.main import main
from lorafleet_core.api.apikeys import KeyIndex, TenantKeys
from lorafleet_core.api.models import AdapterAlias, AdapterAliasStatus
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_core.storage.standalone_state import alias_status_path, load_alias_statuses
from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_files import FileCatalog
from tests.manifest_folder import (
    adapter_manifest,
    alias_manifest,
    find_body,
    pool_hash,
    reconcile_once,
)


def _adapters(folder: Path, *names: str, tenant: str = "acme") -> None:
    for n in names:
        write_object(folder, adapter_manifest(n, tenant, pool_hash(folder)))


def _alias(folder: Path, name: str = "acme-support-prod") -> AdapterAlias:
    return AdapterAlias.model_validate(find_body(folder, "AdapterAlias", name))


def _status(folder: Path, name: str = "acme-support-prod") -> AdapterAliasStatus:
    return load_alias_statuses(folder)[name]


def _served_by_gateway(folder: Path, model: str) -> str | None:
    """The adapter id the gateway's folder catalog resolves `model` to."""
    holder = CatalogHolder()
    FileCatalog(holder, folder).build()
    resolved = holder.current.aliases.get(model)
    return None if resolved is None else resolved.adapter_id


def test_alias_set_then_deploy_then_rollback(folder, capsys):
    _adapters(folder, "acme-support-v1", "acme-support-v2")
    m = ["--manifests", str(folder)]
    assert main(["alias", "set", "acme/support:prod", "acme-support-v1", *m]) == 0
    assert (folder / "adapteralias-acme-support-prod.yaml").is_file()
    assert _alias(folder).spec.adapter == "acme-support-v1"
    # The CLI wrote only the manifest: no status until the reconciler has seen it.
    assert not alias_status_path(folder).exists()
    reconcile_once(folder)

    assert main(["alias", "set", "acme/support:prod", "acme-support-v2", *m]) == 0
    assert _alias(folder).spec.adapter == "acme-support-v2"
    assert _status(folder).adapter == "acme-support-v1"  # not served before the reconciler runs
    reconcile_once(folder)
    status = _status(folder)
    assert (status.adapter, status.previous_adapter) == ("acme-support-v2", "acme-support-v1")
    assert [h.adapter for h in status.history] == ["acme-support-v2", "acme-support-v1"]
    # The status lives outside what `kubectl apply -f folder` reads.
    assert all(o.kind != "" for o in load_folder(folder).objects)
    assert "status" not in yaml.safe_load(
        (folder / "adapteralias-acme-support-prod.yaml").read_text()
    )

    capsys.readouterr()
    assert main(["alias", "rollback", "acme/support:prod", *m]) == 0
    assert _alias(folder).spec.adapter == "acme-support-v1"
    assert "acme-support-v2 -> acme-support-v1" in capsys.readouterr().out
    reconcile_once(folder)
    # Rolling back twice toggles, like `cd -`.
    assert main(["alias", "rollback", "acme/support:prod", *m]) == 0
    assert _alias(folder).spec.adapter == "acme-support-v2"


def test_rollback_of_a_hand_written_alias_edited_by_the_cli(folder):
    """An alias file written by hand (no recorded status) still gets its rollback target."""
    _adapters(folder, "acme-a-v1", "acme-a-v2")
    (folder / "my-aliases.yaml").write_text(
        yaml.safe_dump(alias_manifest("custom-name", "acme/a:prod", "acme-a-v1"))
    )
    m = ["--manifests", str(folder)]
    reconcile_once(folder)
    assert main(["alias", "set", "acme/a:prod", "acme-a-v2", *m]) == 0
    reconcile_once(folder)
    # Edited in place, in the user's file, not duplicated under another name.
    assert not (folder / "adapteralias-acme-a-prod.yaml").exists()
    assert _alias(folder, "custom-name").spec.adapter == "acme-a-v2"
    assert main(["alias", "rollback", "acme/a:prod", *m]) == 0
    assert _alias(folder, "custom-name").spec.adapter == "acme-a-v1"


def test_alias_refusals(folder, capsys):
    """Refusals exit 1 (the command failed); a malformed model name exits 2 (usage)."""
    _adapters(folder, "acme-x-v1")
    _adapters(folder, "other-x-v1", tenant="other")
    m = ["--manifests", str(folder)]
    assert main(["alias", "rollback", "acme/x:prod", *m]) == 1
    assert "no alias for 'acme/x:prod'" in capsys.readouterr().err
    assert main(["alias", "set", "acme/x:prod", "missing-v9", *m]) == 1
    assert "LoRAAdapter 'missing-v9' not found" in capsys.readouterr().err
    assert main(["alias", "set", "acme/x:prod", "other-x-v1", *m]) == 1
    assert "belongs to tenant 'other'" in capsys.readouterr().err
    assert main(["alias", "set", "not-a-model", "acme-x-v1", *m]) == 2  # usage
    assert "invalid alias" in capsys.readouterr().err
    write_object(folder, adapter_manifest("acme-big-v1", "acme", pool_hash(folder), rank=64))
    assert main(["alias", "set", "acme/x:prod", "acme-big-v1", *m]) == 1
    assert "cannot be served (RankTooHigh)" in capsys.readouterr().err
    assert main(["alias", "set", "acme/x:prod", "acme-x-v1", *m]) == 0
    reconcile_once(folder)
    assert main(["alias", "rollback", "acme/x:prod", *m]) == 1
    assert "no previous adapter" in capsys.readouterr().err


def test_alias_names_that_used_to_collide_across_tenants_stay_apart(folder, capsys):
    """`a-b/c:d` and `a/b-c:d` once both became `a-b-c-d`: the second set took the first
    tenant's alias. Now each has its own object, and a name held by another model is refused."""
    _adapters(folder, "ab-v1", tenant="a-b")
    _adapters(folder, "a-v1", tenant="a")
    m = ["--manifests", str(folder)]
    assert main(["alias", "set", "a-b/c:d", "ab-v1", *m]) == 0
    assert main(["alias", "set", "a/b-c:d", "a-v1", *m]) == 0
    served = {
        o.body["spec"]["model"]: o.body["spec"]["adapter"]
        for o in load_folder(folder).of_kind("AdapterAlias")
    }
    assert served == {"a-b/c:d": "ab-v1", "a/b-c:d": "a-v1"}
    assert _served_by_gateway(folder, "a-b/c:d") == "ab-v1"
    # An object written by hand under the name `a/bc:d` maps to, for another model.
    (folder / "hand.yaml").write_text(yaml.safe_dump(alias_manifest("a-bc-d", "a/x:y", "a-v1")))
    assert main(["alias", "set", "a/bc:d", "a-v1", *m]) == 1
    assert "already serves model 'a/x:y'" in capsys.readouterr().err
    assert _alias(folder, "a-bc-d").spec.model == "a/x:y"


def test_alias_set_to_a_failed_adapter_keeps_the_old_version_serving(folder, capsys):
    """Folder mode behaves as a cluster does: `alias set` refuses a target the replicas
    refused (Failed); a hand edit that points there anyway is refused by the reconciler, which
    says why in the alias's Deployed condition."""
    _adapters(folder, "acme-support-v1", "acme-support-v2")
    m = ["--manifests", str(folder)]
    assert main(["alias", "set", "acme/support:prod", "acme-support-v1", *m]) == 0
    reconcile_once(folder)
    assert _served_by_gateway(folder, "acme/support:prod") == "acme-support-v1"

    # Every replica refuses v2 (e.g. its checksum does not match): the adapter is Failed.
    failed = {"acme-support-v2": "checksum mismatch"}
    reconcile_once(folder, failed)
    capsys.readouterr()
    assert main(["alias", "set", "acme/support:prod", "acme-support-v2", *m]) != 0
    assert "acme-support-v2' is Failed" in capsys.readouterr().err
    assert _alias(folder).spec.adapter == "acme-support-v1"
    write_object(
        folder, alias_manifest("acme-support-prod", "acme/support:prod", "acme-support-v2")
    )
    rec = reconcile_once(folder, failed)

    status = _status(folder)
    assert status.adapter == "acme-support-v1"
    deployed = next(c for c in status.conditions if c.type == "Deployed")
    assert (deployed.status, deployed.reason) == ("False", "AdapterNotReady")
    assert "acme-support-v2 is Failed" in deployed.message
    assert "still serving acme-support-v1" in deployed.message
    assert rec.last is not None
    assert rec.last.models == {"acme/support:prod": "acme-support-v1"}
    assert _served_by_gateway(folder, "acme/support:prod") == "acme-support-v1"

    # Once the replicas accept it (fixed weights), the same spec deploys it.
    reconcile_once(folder)
    assert _status(folder).adapter == "acme-support-v2"
    assert _served_by_gateway(folder, "acme/support:prod") == "acme-support-v2"


def test_alias_edited_to_a_rejected_adapter_keeps_the_old_version_serving(folder):
    """The CLI refuses a target it can see is unservable; a hand edit that points there anyway
    is refused by the reconciler, and the old version keeps serving."""
    _adapters(folder, "acme-a-v1")
    write_object(folder, adapter_manifest("acme-a-v2", "acme", pool_hash(folder), rank=64))
    write_object(folder, alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v1"))
    reconcile_once(folder)
    write_object(folder, alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v2"))
    reconcile_once(folder)
    status = _status(folder, "acme-a-prod")
    assert status.adapter == "acme-a-v1"
    deployed = next(c for c in status.conditions if c.type == "Deployed")
    assert (deployed.status, deployed.reason) == ("False", "AdapterNotReady")
    assert "acme-a-v2 is Rejected" in deployed.message
    assert _served_by_gateway(folder, "acme/a:prod") == "acme-a-v1"


def test_keys_create_stores_only_the_hash(folder, capsys):
    m = ["--manifests", str(folder)]
    limits = ["--requests-per-second", "5", "--max-concurrent-requests", "7"]
    assert main(["keys", "create", "acme", *limits, *m]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    assert key.startswith("lf-")
    # The plaintext key appears in no file.
    for path in folder.rglob("*"):
        if path.is_file():
            assert key not in path.read_text()
    secret = find_body(folder, "Secret", "lorafleet-keys-acme")
    tenant = TenantKeys.from_secret(secret)
    assert tenant.requests_per_second == 5
    assert tenant.max_concurrent_requests == 7
    assert secret["stringData"]["maxConcurrentRequests"] == "7"
    assert KeyIndex([tenant]).tenant_for(key) == tenant
    assert KeyIndex([tenant]).tenant_for(key + "x") is None

    # A second key rotates: both verify, the rate limit stays.
    assert main(["keys", "create", "acme", *m]) == 0
    key2 = capsys.readouterr().out.strip().splitlines()[-1]
    tenant = TenantKeys.from_secret(find_body(folder, "Secret", "lorafleet-keys-acme"))
    assert len(tenant.key_hashes) == 2
    assert tenant.requests_per_second == 5
    assert tenant.max_concurrent_requests == 7
    index = KeyIndex([tenant])
    assert index.tenant_for(key) is not None
    assert index.tenant_for(key2) is not None


def test_keys_create_rejects_a_bad_tenant(folder, capsys):
    assert main(["keys", "create", "Not_A_Label", "--manifests", str(folder)]) == 2
    assert "error" in capsys.readouterr().err
