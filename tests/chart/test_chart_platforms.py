"""The chart on the platforms users run it on: Argo CD (renders with `helm template`, no
cluster: two renders must be identical or the application never syncs) and umbrella charts
(the chart as a dependency, with `global` set by the parent)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.chart.chart_render import (
    ALL_ON,
    CHART,
    CI_VALUES,
    by_kind,
    ci_values,
    deployment,
    render,
)

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "all-on": ALL_ON,
    "secret-mode": {**ALL_ON, "internalAuth": {"mode": "secret"}},
    "existing-secret": {"internalSecret": {"existingSecret": True}},
    **{path.name: ci_values(path.name) for path in CI_VALUES},
}


def _render_text(values: dict[str, Any]) -> dict[str, str]:
    rendered: dict[str, str] = helm_python.Chart.load(CHART).render(
        values, name="lf", namespace="serving"
    )
    return rendered


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_two_renders_of_every_values_set_are_byte_identical(name: str) -> None:
    first, second = _render_text(VALUE_SETS[name]), _render_text(VALUE_SETS[name])
    assert first.keys() == second.keys()
    for path in first:
        assert first[path] == second[path], f"{name}: {path} differs between two renders"
    assert any("kind: Deployment" in text for text in first.values())  # it rendered objects


def test_the_chart_renders_as_a_dependency_of_an_umbrella_chart_that_sets_global(
    tmp_path: Path,
) -> None:
    shutil.copytree(CHART, tmp_path / "lorafleet")
    umbrella = tmp_path / "platform"
    umbrella.mkdir()
    (umbrella / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "0.1.0",
                "dependencies": [
                    {
                        "name": "lorafleet",
                        "version": ">=0.0.0-0",
                        "repository": f"file://{tmp_path / 'lorafleet'}",
                    }
                ],
            }
        )
    )
    (umbrella / "values.yaml").write_text(
        yaml.safe_dump(
            {
                "global": {"imageRegistry": "registry.internal", "clusterDomain": "c.local"},
                "lorafleet": {"gateway": {"replicas": 3}},
            }
        )
    )
    helm_python.dependency_update(umbrella)
    assert list((umbrella / "charts").glob("lorafleet-*.tgz"))
    rendered = helm_python.Chart.load(umbrella).render({}, name="platform", namespace="serving")
    docs = [
        d
        for path, text in rendered.items()
        if not path.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text)
        if d
    ]
    gateway = deployment(docs, "-gateway")
    assert gateway["spec"]["replicas"] == 3  # the parent's values reach the subchart
    assert by_kind(docs, "Deployment")


def _pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [d["spec"]["template"]["spec"] for d in by_kind(docs, "Deployment")]
    specs += [
        d["spec"]["jobTemplate"]["spec"]["template"]["spec"] for d in by_kind(docs, "CronJob")
    ]
    return specs


def test_openshift_values_render_pods_without_fixed_ids_that_restricted_v2_admits() -> None:
    docs = render(ci_values("openshift-values.yaml"))
    specs = _pod_specs(docs)
    assert len(specs) == 3  # operator, gateway, canary
    for spec in specs:
        pod = spec.get("securityContext", {})
        # restricted-v2 assigns these from the namespace's range and refuses other values
        assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(pod)
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert not {"runAsUser", "runAsGroup"} & set(sc)
            assert sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert not sc["capabilities"].get("add")
            seccomp = sc.get("seccompProfile", pod.get("seccompProfile"))
            assert seccomp == {"type": "RuntimeDefault"}
    # the operator's replica pods follow the pool's securityMode
    (pool,) = by_kind(docs, "ReplicaPool")
    assert pool["spec"]["template"]["securityMode"] == "platform"
    # the defaults still pin the image's user (plain Kubernetes' restricted profile)
    for spec in _pod_specs(render(ALL_ON)):
        assert spec["securityContext"]["runAsUser"] == 10001


def test_conventional_keys_name_override_and_image_digest() -> None:
    digest = "sha256:" + "b" * 64
    docs = render({"fullnameOverride": "serve", "image": {"digest": digest}})
    gateway = deployment(docs, "serve-gateway")
    assert gateway["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"ghcr.io/lorafleet/lorafleet@{digest}"
    )
    docs = render({"nameOverride": "lf2"})
    operator = deployment(docs, "lf-lf2-operator")
    assert operator["metadata"]["labels"]["app.kubernetes.io/name"] == "lf2"


def test_agent_service_account_values_and_pool_accounts_get_the_agents_rbac() -> None:
    role_arn = "arn:aws:iam::123456789012:role/lorafleet-replica"
    docs = render(
        {
            "serviceAccount": {
                "agent": {
                    "annotations": {"eks.amazonaws.com/role-arn": role_arn},
                    "extraAccounts": ["lorafleet-replica"],
                }
            }
        }
    )
    (account,) = [
        a for a in by_kind(docs, "ServiceAccount") if a["metadata"]["name"].endswith("-agent")
    ]
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": role_arn}
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        (binding,) = [b for b in by_kind(docs, kind) if "-agent" in b["metadata"]["name"]]
        names = {s["name"] for s in binding["subjects"]}
        assert names == {"lf-lorafleet-agent", "lorafleet-replica"}, kind
    # an account made elsewhere: not created, but bound and given to the operator's pods
    docs = render({"serviceAccount": {"agent": {"create": False, "name": "irsa-agent"}}})
    assert not [a for a in by_kind(docs, "ServiceAccount") if "agent" in a["metadata"]["name"]]
    env = deployment(docs, "-operator")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "LORAFLEET_OPERATOR_REPLICA_SERVICE_ACCOUNT", "value": "irsa-agent"} in env
    with pytest.raises(helm_python.HelmError, match=r"serviceAccount\.agent\.name"):
        render({"serviceAccount": {"agent": {"create": False}}})


def test_the_http_route_has_stream_safe_timeouts_and_takes_others() -> None:
    route = {"enabled": True, "parentRefs": [{"name": "public"}]}
    (doc,) = by_kind(render({"gateway": {"httpRoute": route}}), "HTTPRoute")
    # Envoy Gateway's default (15 s) would cut a stream: the default outlasts a long one
    assert doc["spec"]["rules"][0]["timeouts"] == {"request": "900s"}
    timeouts = {"request": "0s", "backendRequest": "0s"}
    (doc,) = by_kind(
        render({"gateway": {"httpRoute": {**route, "timeouts": timeouts}}}), "HTTPRoute"
    )
    assert doc["spec"]["rules"][0]["timeouts"] == timeouts
    with pytest.raises(helm_python.HelmError, match="timeouts"):
        render({"gateway": {"httpRoute": {**route, "timeouts": {"request": "15 minutes"}}}})
