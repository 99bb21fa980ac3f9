"""The canary probe CronJob: every marker through the public Service with the key Secret, its
required values, and the network policy letting it in."""

from __future__ import annotations

import pytest

from tests.chart.chart_render import ALL_ON, by_kind, render


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
