"""The CLI against a Kubernetes API (kmock's emulator over real HTTP): the cluster backend.

kmock has no operator behind it, so where the operator would write alias status the test
writes it, as the operator's status patch would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import Configuration

from lorafleet_cli import cmd_status
from lorafleet_cli.cmd_adapter import push
from lorafleet_cli.cmd_alias import AliasError, rollback, set_alias
from lorafleet_cli.cmd_keys import create_key
from lorafleet_cli.main import build_parser
from lorafleet_cli.targets import ClusterTarget
from lorafleet_core.api.apikeys import KeyIndex, TenantKeys
from lorafleet_core.api.names import API_KEYS_SECRET_LABEL
from tests.manifest_folder import make_adapter, pool_manifest
from tests.operator import kmock_cluster
from tests.operator.kmock_cluster import Cluster

# Secrets are not among the operator tests' resources; the CLI writes tenant keys there.
kmock_cluster.RESOURCES.setdefault("v1/secrets", ("Secret", True, set()))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(namespace="cli")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def target(cluster: Cluster) -> Iterator[ClusterTarget]:
    target = ClusterTarget("cli", Configuration(host=cluster.url))
    try:
        yield target
    finally:
        target.close()


def _obj(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    found = cluster.get(cluster.path(plural, name))
    assert found is not None, f"{plural}/{name} missing"
    return found


def test_push_alias_and_rollback_on_a_cluster(
    cluster: Cluster, target: ClusterTarget, tmp_path: Path, base_model: Path
) -> None:
    cluster.create(cluster.path("replicapools"), pool_manifest("main", base_model))
    args = build_parser().parse_args(
        ["adapter", "push", str(make_adapter(tmp_path / "a")), "--tenant", "acme",
         "--name", "support", "--version", "v1", "--pool", "main", "--quiet",
         "--store", f"file://{tmp_path / 'store'}"]
    )  # fmt: skip
    push(args, target)
    args.version, args.dir = "v2", make_adapter(tmp_path / "b", seed=2)
    push(args, target)
    v1 = _obj(cluster, "loraadapters", "acme-support-v1")
    assert v1["spec"]["rank"] == 4
    assert v1["spec"]["weightsUri"] == f"file://{tmp_path / 'store'}/acme/support/v1/"

    set_alias(target, "acme/support:prod", "acme-support-v1")
    assert _obj(cluster, "adapteraliases", "acme-support-prod")["spec"]["adapter"] == (
        "acme-support-v1"
    )
    with pytest.raises(AliasError, match="no previous adapter"):
        rollback(target, "acme/support:prod")  # the operator has recorded nothing yet

    name, previous = set_alias(target, "acme/support:prod", "acme-support-v2")
    assert (name, previous) == ("acme-support-prod", "acme-support-v1")
    alias = _obj(cluster, "adapteraliases", "acme-support-prod")
    assert alias["spec"]["adapter"] == "acme-support-v2"
    # What the operator records after the deploy.
    cluster.patch(
        cluster.path("adapteraliases", "acme-support-prod") + "/status",
        {"status": {"adapter": "acme-support-v2", "previousAdapter": "acme-support-v1"}},
    )
    assert rollback(target, "acme/support:prod") == ("acme-support-v2", "acme-support-v1")
    assert _obj(cluster, "adapteraliases", "acme-support-prod")["spec"]["adapter"] == (
        "acme-support-v1"
    )

    report = "\n".join(cmd_status.cluster_report(target))
    assert "name=acme-support-v2" in report
    assert "model=acme/support:prod  adapter=acme-support-v2  previous=acme-support-v1" in report


def test_keys_create_on_a_cluster(cluster: Cluster, target: ClusterTarget) -> None:
    key, where = create_key(target, "acme", requests_per_second=3)
    assert where == "secrets/lorafleet-keys-acme in namespace cli"
    key2, _ = create_key(target, "acme")
    secret = cluster.get(cluster.path("secrets", "lorafleet-keys-acme", group="v1"))
    assert secret is not None
    assert key not in str(secret)
    assert key2 not in str(secret)
    tenant = TenantKeys.from_secret(secret)
    assert tenant.requests_per_second == 3
    index = KeyIndex([tenant])
    assert index.tenant_for(key) is not None
    assert index.tenant_for(key2) is not None


def test_kubeconfig_context_gives_server_token_and_namespace(
    cluster: Cluster, tmp_path: Path, base_model: Path
) -> None:
    """The CLI reads the kubeconfig through lorafleet_core.kube.client, as `kubectl` would."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": cluster.url}}],
                "users": [{"name": "dev", "user": {"token": "dev-token"}}],
                "contexts": [
                    {
                        "name": "dev",
                        "context": {"cluster": "kmock", "user": "dev", "namespace": "cli"},
                    }
                ],
                "current-context": "dev",
            }
        )
    )
    cluster.create(cluster.path("replicapools"), pool_manifest("from-kubeconfig", base_model))
    target = ClusterTarget.from_kubeconfig(str(kubeconfig), None, None)
    try:
        assert target.namespace == "cli"
        assert "from-kubeconfig" in {p["metadata"]["name"] for p in target.list("ReplicaPool")}
    finally:
        target.close()
    seen = [r for r in cluster.emulator._requests if "replicapools" in str(r.url)]
    assert seen[-1].headers.get("Authorization") == "Bearer dev-token"


def test_only_key_secrets_are_read_from_a_cluster(cluster: Cluster, target: ClusterTarget) -> None:
    """The CLI's Secret list is the API server's answer to its label selector, taken as is: a
    Secret of the namespace without the key label (image pull credentials, TLS) is no tenant's
    key Secret and must not be read as one (a wrong selector passed here before the harness
    filtered by it)."""
    secrets = cluster.path("secrets", group="v1")
    cluster.create(secrets, {"metadata": {"name": "registry-creds"}, "type": "Opaque"})
    cluster.create(
        secrets,
        {"metadata": {"name": "keys-labelled-false", "labels": {API_KEYS_SECRET_LABEL: "false"}}},
    )
    create_key(target, "globex")
    names = {s["metadata"]["name"] for s in target.list("Secret")}
    assert "lorafleet-keys-globex" in names
    assert not names & {"registry-creds", "keys-labelled-false"}
