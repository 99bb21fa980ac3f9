"""Hostile Helm values: refused by values.schema.json (or the chart's own checks) before any
manifest is rendered, never turned into a manifest that says something else."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from tests.chart.chart_render import ALL_ON, CHART, by_kind, render

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "image",
    [
        # A newline in the tag used to become YAML of its own next to `image:` (the template did
        # not quote it): this rendered a container with `workingDir: /evil`.
        {"tag": "0.1.0\n          workingDir: /evil"},
        {"tag": "0.1.0 latest"},
        {"tag": ""},
        {"tag": "-rc"},
        {"repository": "ghcr.io/lorafleet/lorafleet\nx"},
        {"repository": "GHCR.io/Lorafleet"},
        {"repository": "ghcr.io/lorafleet/lorafleet:0.1.0"},  # the tag belongs in `tag`
    ],
)
def test_image_references_that_are_not_references_are_refused(image):
    values = {"image": {"repository": "ghcr.io/lorafleet/lorafleet", "tag": "0.1.0", **image}}
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema(values)


@pytest.mark.parametrize(
    ("repository", "tag"),
    [
        ("ghcr.io/lorafleet/lorafleet", "0.1.0"),
        ("localhost:5000/lorafleet", "dev_2026-12-01"),
        ("registry.example.com/team/lorafleet", f"0.1.0@{DIGEST}"),
    ],
)
def test_real_image_references_render_quoted_and_whole(repository, tag):
    docs = render({"image": {"repository": repository, "tag": tag}})
    images = {
        c["image"]
        for d in by_kind(docs, "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"{repository}:{tag}"}


def test_gateway_ports_that_collide_are_refused():
    """One port for both would put the internal endpoints on the public Service's port."""
    with pytest.raises(helm_python.HelmError, match="must differ"):
        render({"gateway": {"port": 9090, "internalPort": 9090}})


@pytest.mark.parametrize(
    "values",
    [
        # Each reached a manifest unquoted: a newline and YAML after it became keys of their own.
        {"canary": {"keySecret": {"name": "k", "key": "api-key\n      x: 1"}}},
        {"operator": {"control": {"tokenSecret": "ctl\n            x: 1"}}},
        {"gateway": {"pdb": {"maxUnavailable": "1\n  x: 1"}}},
        {"gateway": {"pdb": {"maxUnavailable": -1}}},
        {"gateway": {"httpRoute": {"pathPrefix": "/v1}}\n  x: 1"}}},
    ],
)
def test_values_rendered_unquoted_take_only_their_own_syntax(values):
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema(values)


@pytest.mark.parametrize(
    "values",
    [
        {"gateway": {"pdb": {"maxUnavailable": "25%"}}},
        {"gateway": {"pdb": {"maxUnavailable": 1}}},
        {"operator": {"control": {"tokenSecret": "lorafleet-control.admin"}}},
        {"gateway": {"httpRoute": {"pathPrefix": "/v1"}}},
    ],
)
def test_ordinary_values_of_those_fields_pass(values):
    helm_python.Chart.load(CHART).validate_schema(values)


# Every optional variable on: the Redis password (valueFrom), secret-mode tokens, the control API.
ALL_ENV: dict[str, dict[str, Any]] = {
    "gateway": {
        "rateLimits": {
            "backend": "redis",
            "redis": {"url": "redis://r:6379", "passwordSecret": {"name": "p", "key": "k"}},
        }
    },
    "operator": {"control": {"enabled": True, "tokenSecret": "ctl"}},
    "internalAuth": {"mode": "secret"},
}


@pytest.mark.parametrize("component", ["gateway", "operator"])
def test_extra_env_cannot_replace_a_variable_the_chart_sets(component):
    """Kubernetes lets the later of two same-named variables win: each of these rendered and
    replaced what the chart derived from its values (LORAFLEET_OPERATOR_REPLICA_INTERNAL_AUTH,
    the replicas' auth mode; LORAFLEET_GATEWAY_REPLICA_DATA_TOKEN; the ports; ...)."""
    (deployment,) = [
        d
        for d in by_kind(render(ALL_ENV), "Deployment")
        if d["metadata"]["name"].endswith(component)
    ]
    names = [e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert len(names) > 8, names
    # a credential the chart gives as a file (X_FILE): a value X would win over the file
    prefix = f"LORAFLEET_{component.upper()}_"
    assert f"{prefix}REPLICA_DATA_TOKEN_FILE" in names
    names.append(f"{prefix}REPLICA_DATA_TOKEN")
    for name in names:
        values = {**ALL_ENV, component: {**ALL_ENV[component], "extraEnv": [{"name": name}]}}
        with pytest.raises(helm_python.HelmError, match=f"{component}.extraEnv sets {name},"):
            render(values)


def test_extra_env_adds_variables_the_chart_does_not_set():
    values = {
        "operator": {"extraEnv": [{"name": "LORAFLEET_OPERATOR_LOG_LEVEL", "value": "DEBUG"}]},
        "gateway": {"extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]},
    }
    env = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["env"]
        for d in by_kind(render(values), "Deployment")
    }
    assert env["lf-lorafleet-operator"][-1] == values["operator"]["extraEnv"][0]
    assert env["lf-lorafleet-gateway"][-1] == values["gateway"]["extraEnv"][0]
    for variables in env.values():
        names = [e["name"] for e in variables]
        assert len(names) == len(set(names)), names


@pytest.mark.parametrize(
    "values",
    [{"gateway": {"replicas": 101}}, {"canary": {"rounds": 1001}}, {"canary": {"interval": 3601}}],
)
def test_counts_without_a_sane_use_are_refused(values):
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema(values)


def test_canary_rounds_that_cannot_finish_before_the_deadline_are_refused():
    """151 rounds 2 s apart sleep 300 s: the Job would be killed at its 300 s deadline on
    every run, and LorafleetCanaryFailed would fire for a healthy fleet."""
    canary: dict[str, Any] = dict(ALL_ON["canary"])  # type: ignore[call-overload]
    canary.update(rounds=151, interval=2, deadlineSeconds=300)
    with pytest.raises(helm_python.HelmError, match="does not fit"):
        render({**ALL_ON, "canary": canary})
    render({**ALL_ON, "canary": {**canary, "rounds": 150}})
