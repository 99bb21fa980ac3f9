"""Hostile Helm values: refused by values.schema.json (or the chart's own checks) before any
manifest is rendered, never turned into a manifest that says something else."""

from __future__ import annotations

import helm_python
import pytest

from tests.chart.chart_render import CHART, by_kind, render

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
