"""Credentials in the chart: the pool's internal Secret and who reads which token, the projected
ServiceAccount tokens sent to agents, the agents' own account, which ports of the replicas whom
reach, and the control API's objects."""

from __future__ import annotations

from typing import Any

from tests.chart.chart_render import by_kind, deployment, render, validate_builtin


def _secret_refs(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e["valueFrom"]["secretKeyRef"]
        for c in pod["spec"]["template"]["spec"]["containers"]
        for e in c["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    ]


INTERNAL_DIR = "/var/run/secrets/lorafleet/internal"


def _token_files(pod: dict[str, Any], prefix: str) -> dict[str, str]:
    """The pool-Secret files a component reads its tokens from (env name -> path), after
    checking the Secret is mounted, optionally, at the directory those paths name."""
    spec = pod["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "pool-secret"]
    assert volume["secret"]["secretName"] == "default-internal"
    assert volume["secret"]["optional"] is True  # the pods start before the operator creates it
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "pool-secret"]
    assert mount["mountPath"] == INTERNAL_DIR
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    return {
        k.removeprefix(prefix): v
        for k, v in env.items()
        if k.startswith(prefix) and isinstance(v, str) and v.startswith(INTERNAL_DIR)
    }


def test_the_chart_renders_no_inside_secret_and_the_operator_creates_it():
    # A render with random tokens differs on every `helm template` (Argo CD): none is rendered.
    docs = render()
    assert [s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == "default-internal"] == []
    operator_env = {
        e["name"]: e.get("value")
        for e in deployment(docs, "-operator")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert operator_env["LORAFLEET_OPERATOR_INTERNAL_SECRET"] == "default-internal"
    # existingSecret: someone else creates it; the operator does not.
    mine = render({"internalSecret": {"existingSecret": True}})
    env = deployment(mine, "-operator")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "LORAFLEET_OPERATOR_INTERNAL_SECRET" not in {e["name"] for e in env}


def test_the_gateway_reads_only_the_tokens_from_files_it_re_reads():
    # tokenReview (the default): the gateway reads only the data-port token (a shared secret
    # in every mode: the data path does not wait on the API server).
    gateway = deployment(render(), "-gateway")
    assert _secret_refs(gateway) == []
    assert _token_files(gateway, "LORAFLEET_GATEWAY_") == {
        "REPLICA_DATA_TOKEN_FILE": f"{INTERNAL_DIR}/data-token"
    }
    gateway = deployment(render({"internalAuth": {"mode": "secret"}}), "-gateway")
    assert _token_files(gateway, "LORAFLEET_GATEWAY_") == {
        "REPLICA_TOKEN_FILE": f"{INTERNAL_DIR}/agent-token",
        "REPLICA_DATA_TOKEN_FILE": f"{INTERNAL_DIR}/data-token",
    }
    # vLLM's API key is not among the files the gateway can read
    (volume,) = [
        v for v in gateway["spec"]["template"]["spec"]["volumes"] if v["name"] == "pool-secret"
    ]
    assert {i["key"] for i in volume["secret"]["items"]} == {"agent-token", "data-token"}


def test_operator_may_create_but_never_read_secrets_and_holds_the_token_merged_pools_copy():
    # autoMerge: a merged pool's <pool>-internal Secret gets the agents' token the callers hold
    # (secret mode); the operator creates it and cannot read any Secret through the API.
    docs = render({"internalAuth": {"mode": "secret"}})
    operator = deployment(docs, "-operator")
    assert _token_files(operator, "LORAFLEET_OPERATOR_") == {
        "REPLICA_TOKEN_FILE": f"{INTERNAL_DIR}/agent-token",
        # copied into a merged pool's Secret, in every mode
        "REPLICA_DATA_TOKEN_FILE": f"{INTERNAL_DIR}/data-token",
    }
    rules = [
        r for d in by_kind(docs, "Role") if "-operator" in d["metadata"]["name"] for r in d["rules"]
    ]
    secret_verbs = {v for r in rules if "secrets" in r["resources"] for v in r["verbs"]}
    assert secret_verbs == {"create"}
    pool_verbs = {v for r in rules if "replicapools" in r["resources"] for v in r["verbs"]}
    assert {"create", "patch", "delete"} <= pool_verbs
    # tokenReview (the default) with no control API: the operator holds no agents' token
    assert _token_files(deployment(render(), "-operator"), "LORAFLEET_OPERATOR_") == {
        "REPLICA_DATA_TOKEN_FILE": f"{INTERNAL_DIR}/data-token"
    }


def _projected_token(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str | None]]:
    spec = pod["spec"]["template"]["spec"]
    (volume,) = [v for v in spec.get("volumes", []) if v["name"] == "agent-token"]
    (source,) = volume["projected"]["sources"]
    container = spec["containers"][0]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "agent-token"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    token_file = f"{mount['mountPath']}/{source['serviceAccountToken']['path']}"
    return source["serviceAccountToken"], {"file": token_file, **env}


def test_gateway_and_operator_send_a_projected_token_for_the_agents_audience():
    docs = render({"operator": {"control": {"enabled": True, "serviceAccounts": ["ci:pipe"]}}})
    for part, prefix in (("-gateway", "LORAFLEET_GATEWAY_"), ("-operator", "LORAFLEET_OPERATOR_")):
        token, env = _projected_token(deployment(docs, part))
        assert token == {"audience": "lorafleet-agent", "expirationSeconds": 3600, "path": "token"}
        assert env[f"{prefix}REPLICA_TOKEN_FILE"] == env["file"], part
        assert f"{prefix}REPLICA_TOKEN" not in env
    validate_builtin(docs)


def test_agents_get_an_account_allowed_to_review_tokens_and_post_events():
    docs = render()
    (account,) = [
        a for a in by_kind(docs, "ServiceAccount") if a["metadata"]["name"] == "lf-lorafleet-agent"
    ]
    subject = {"kind": "ServiceAccount", "name": "lf-lorafleet-agent", "namespace": "serving"}
    (cluster_role,) = [
        r
        for r in by_kind(docs, "ClusterRole")
        if r["metadata"]["name"].startswith("lf-lorafleet-agent")
    ]
    assert cluster_role["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]
    (binding,) = [
        b
        for b in by_kind(docs, "ClusterRoleBinding")
        if b["roleRef"]["name"] == cluster_role["metadata"]["name"]
    ]
    assert binding["subjects"] == [subject]
    (role,) = [r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "lf-lorafleet-agent"]
    events = next(r for r in role["rules"] if r["resources"] == ["events"])
    assert {"create", "patch"} <= set(events["verbs"])
    (role_binding,) = [
        b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["name"] == "lf-lorafleet-agent"
    ]
    assert role_binding["subjects"] == [subject]
    # Nothing else: the agents cannot read Secrets, pods or write adapters.
    assert all(r["verbs"] == ["get"] for r in role["rules"] if r["resources"] != ["events"])
    assert account["metadata"]["name"] == subject["name"]
    # The secret fallback needs no TokenReview.
    assert not [
        r
        for r in by_kind(render({"internalAuth": {"mode": "secret"}}), "ClusterRole")
        if "agent" in r["metadata"]["name"]
    ]


def test_the_operator_may_review_pools_accounts_in_token_review_mode_only():
    """The operator's SubjectAccessReviews of each pool's ServiceAccount (its AgentPermissions
    condition) need `create` on subjectaccessreviews; the secret mode checks nothing."""
    sar = {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    }

    def operator_rules(values: dict[str, Any]) -> list[dict[str, Any]]:
        (role,) = [
            r
            for r in by_kind(render(values), "ClusterRole")
            if r["metadata"]["name"].startswith("lf-lorafleet-operator")
        ]
        rules: list[dict[str, Any]] = role["rules"]
        return rules

    assert sar in operator_rules({})
    assert sar not in operator_rules({"internalAuth": {"mode": "secret"}})


def test_operator_tells_the_pod_planner_the_mode_the_callers_and_the_agent_account():
    for mode in ("tokenReview", "secret"):
        operator = deployment(render({"internalAuth": {"mode": mode}}), "-operator")
        env = {
            e["name"]: e.get("value")
            for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["LORAFLEET_OPERATOR_REPLICA_INTERNAL_AUTH"] == mode
        assert env["LORAFLEET_OPERATOR_REPLICA_CALLERS"] == (
            "serving:lf-lorafleet-gateway,serving:lf-lorafleet-operator"
        )
        assert env["LORAFLEET_OPERATOR_REPLICA_SERVICE_ACCOUNT"] == "lf-lorafleet-agent"
        assert env["LORAFLEET_OPERATOR_REPLICA_TOKEN_AUDIENCE"] == "lorafleet-agent"
    # The callers named are the accounts the gateway and operator pods run as.
    docs = render()
    accounts = {
        f"serving:{deployment(docs, p)['spec']['template']['spec']['serviceAccountName']}"
        for p in ("-gateway", "-operator")
    }
    assert accounts == set(env["LORAFLEET_OPERATOR_REPLICA_CALLERS"].split(","))


def test_replicas_data_port_only_from_the_gateway_and_internal_port_only_from_the_release():
    policies = {p["metadata"]["name"]: p for p in by_kind(render(), "NetworkPolicy")}
    policy = policies["lf-lorafleet-replicas"]
    data, release = policy["spec"]["ingress"][:2]
    selector = {"app.kubernetes.io/name": "lorafleet", "app.kubernetes.io/instance": "lf"}
    assert data["from"] == [
        {"podSelector": {"matchLabels": {**selector, "app.kubernetes.io/component": "gateway"}}}
    ]
    assert [p["port"] for p in data["ports"]] == [8100]
    assert release["from"] == [{"podSelector": {"matchLabels": selector}}]
    assert [p["port"] for p in release["ports"]] == [8101]
    # No other rule opens the data port.
    others = policy["spec"]["ingress"][1:]
    assert all(p["port"] != 8100 for rule in others for p in rule.get("ports", []))
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_control_api_is_off_by_default_and_rendered_whole_when_enabled():
    assert not [d for d in render() if d["metadata"]["name"] == "lf-lorafleet-control"]
    control = {"enabled": True, "tokenSecret": "ctl", "serviceAccounts": ["ci:pipeline"]}
    # The shared-token fallback: forwarded calls carry the Secret's token (tokenReview: a
    # projected token, test_gateway_and_operator_send_a_projected_token_for_the_agents_audience).
    docs = render({"operator": {"control": control}, "internalAuth": {"mode": "secret"}})
    validate_builtin(docs)
    (deploy,) = [
        d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("operator")
    ]
    pod = deploy["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["LORAFLEET_OPERATOR_CONTROL_PORT"] == "8102"
    assert env["LORAFLEET_OPERATOR_CONTROL_SERVICE_ACCOUNTS"] == "ci:pipeline"
    assert (
        env["LORAFLEET_OPERATOR_CONTROL_TOKEN_SHA256_FILE"] == "/etc/lorafleet/control/token-sha256"
    )
    (control_volume,) = [v for v in pod["volumes"] if v["name"] == "control-token"]
    assert control_volume["secret"]["secretName"] == "ctl"
    assert _token_files(deploy, "LORAFLEET_OPERATOR_")["REPLICA_TOKEN_FILE"] == (
        f"{INTERNAL_DIR}/agent-token"
    )
    (svc,) = [d for d in by_kind(docs, "Service") if d["metadata"]["name"].endswith("-control")]
    assert svc["spec"]["type"] == "ClusterIP"
    roles = by_kind(docs, "Role") + by_kind(docs, "ClusterRole")
    rules = [r for d in roles if "-operator" in d["metadata"]["name"] for r in d["rules"]]
    assert {
        "resources": ["tokenreviews"],
        "verbs": ["create"],
        "apiGroups": ["authentication.k8s.io"],
    } in rules
    assert any("create" in r["verbs"] and "loraadapters" in r["resources"] for r in rules)
