"""The canary probe CronJob: every marker through the public Service with the key Secret, its
required values, and the network policy letting it in."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from tests.chart.chart_render import ALL_ON, CHART, by_kind, render

CANARY: dict[str, Any] = dict(ALL_ON["canary"])  # type: ignore[call-overload]


def test_canary_cronjob_probes_every_marker_through_the_public_service_with_the_key_secret():
    (cron,) = by_kind(render(ALL_ON), "CronJob")
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0  # a failed probe is a finding: the alert sees the failed Job
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:4] == ["python3", "-m", "lorafleet_cli.main", "canary"]
    assert command[command.index("--gateway") + 1] == "http://lf-lorafleet-gateway.serving.svc"
    markers = command[command.index("--markers") + 1 :]
    assert sorted(markers) == ["canary/owl:prod=OWL-3", "canary/zebra:prod=ZEBRA-7"]
    key_file = command[command.index("--key-file") + 1]
    (mount,) = container["volumeMounts"]
    assert key_file.startswith(mount["mountPath"] + "/")
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == "canary-key"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_canary_needs_markers_and_a_key_secret():
    with pytest.raises(Exception, match=r"canary\.markers"):
        render({"canary": {"enabled": True, "keySecret": {"name": "k", "key": "api-key"}}})
    with pytest.raises(Exception, match=r"canary\.keySecret\.name"):
        render({"canary": {"enabled": True, "markers": {"a/b:c": "M"}}})


def test_restricted_gateway_peers_still_admit_the_canary():
    values = {**ALL_ON, "networkPolicy": {"gatewayPeers": [{"namespaceSelector": {}}]}}
    policy = next(
        d
        for d in by_kind(render(values), "NetworkPolicy")
        if d["metadata"]["name"].endswith("gateway")
    )
    peers = policy["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {}} in peers
    canary = [p for p in peers if "podSelector" in p]
    assert canary[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "canary"


def test_an_alias_with_a_split_renders_one_marker_per_version():
    markers = {
        "canary/zebra:prod": "ZEBRA-7",
        "canary/owl:prod": {"canary-owl-v2": "OWL-4", "canary-owl-v1": "OWL-3"},
    }
    values = {**ALL_ON, "canary": {**CANARY, "markers": markers}}
    (cron,) = by_kind(render(values), "CronJob")
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    # the form `lorafleet canary --markers` reads as "only these versions, each its own marker"
    assert command[command.index("--markers") + 1 :] == [
        "canary/owl:prod@canary-owl-v1=OWL-3",
        "canary/owl:prod@canary-owl-v2=OWL-4",
        "canary/zebra:prod=ZEBRA-7",
    ]


@pytest.mark.parametrize(
    "marker",
    [
        {},  # an alias with no version at all would accept nothing: every run would page
        {"Canary-Owl-V1": "OWL-3"},  # not a LoRAAdapter name: no answer could ever match
        {"canary-owl-v1": ""},
        {"canary-owl-v1": {"nested": "OWL-3"}},
        "",
    ],
)
def test_per_version_markers_that_cannot_be_right_are_refused(marker):
    values = {"canary": {**CANARY, "markers": {"canary/owl:prod": marker}}}
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema(values)
