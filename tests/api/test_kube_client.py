"""lorafleet_core.kube.client: one way to find credentials, for operator, gateway and CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lorafleet_core.kube.client import (
    KubeConfigError,
    bearer_token,
    kubeconfig_namespace,
    load_configuration,
)


def write_kubeconfig(path: Path, server: str, namespace: str | None = "team-a") -> Path:
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "kc-token"}}],
                "contexts": [{"name": "ctx", "context": context}],
                "current-context": "ctx",
            }
        )
    )
    return path


async def test_an_explicit_server_wins_and_its_token_is_a_bearer_token():
    cfg = await load_configuration(api_server="https://api.example:6443/", token="t0k")
    assert cfg.host == "https://api.example:6443"
    assert cfg.verify_ssl is True
    assert bearer_token(cfg) == ("Bearer", "t0k")


async def test_outside_a_pod_the_kubeconfig_is_used(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kc = write_kubeconfig(tmp_path / "kc", "https://kc.example")
    monkeypatch.setenv("KUBECONFIG", str(kc))
    for first in (False, True):
        cfg = await load_configuration(kubeconfig_first=first)
        assert cfg.host == "https://kc.example"
        assert bearer_token(cfg)[1] == "kc-token"
    assert kubeconfig_namespace(str(kc), None) == "team-a"
    assert kubeconfig_namespace(
        str(write_kubeconfig(tmp_path / "k2", "https://x", None)), None
    ) == ("default")


async def test_no_credentials_at_all_says_where_it_looked(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(KubeConfigError, match="no service account and no usable kubeconfig"):
        await load_configuration()
