"""The Helm chart renders, lints and validates offline (helm-python-sdk + kubernetes-validate).

No cluster: these check what `helm install` would send, and that the security-relevant shape
(public port only on the public Service, replicas reachable only from lorafleet) holds.
"""

from __future__ import annotations

import copy
import filecmp
import json
import re
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from lorafleet_core import crd_validation
from tests.exported_metrics import exported_families, series_names

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lorafleet"
KUBE_VERSION = "1.30.0"
POOL_SPEC = {
    "baseModel": {"name": "llama-7b", "hash": "sha256:" + "a" * 64, "uri": "s3://models/llama/"},
    "replicas": {"min": 2, "max": 8},
}
ALL_ON = {
    "monitoring": {"serviceMonitor": True, "prometheusRule": True, "grafanaDashboard": True},
    "replicaPool": {"create": True, "name": "main", "spec": POOL_SPEC},
    "canary": {
        "enabled": True,
        "markers": {"canary/zebra:prod": "ZEBRA-7", "canary/owl:prod": "OWL-3"},
        "keySecret": {"name": "canary-key", "key": "api-key"},
    },
}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    chart = helm_python.Chart.load(CHART)
    rendered = chart.render(values or {}, name="lf", namespace="serving")
    docs: list[dict[str, Any]] = []
    for path, text in rendered.items():
        if not path.endswith("NOTES.txt"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def notes(values: dict[str, Any] | None = None) -> str:
    rendered = helm_python.Chart.load(CHART).render(values or {}, name="lf", namespace="serving")
    text: str = next(t for path, t in rendered.items() if path.endswith("NOTES.txt"))
    return text


CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))


def ci_values(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "ci" / name).read_text())
    return loaded


def validate_builtin(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kubernetes-validate (strict) every built-in kind; returns the others."""
    others = []
    for doc in docs:
        group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
        if group in ("", "apps", "rbac.authorization.k8s.io", "networking.k8s.io", "policy"):
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        else:
            others.append(doc)
    return others


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_lint_is_clean():
    report = helm_python.lint(str(CHART), ALL_ON, strict=True)
    errors = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    # "icon is recommended" is info (severity 1); warnings and errors fail.
    assert errors == []


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "all-options"])
def test_builtin_kinds_validate_against_kubernetes_schemas(values):
    docs = render(values)
    builtin = [
        d
        for d in docs
        if "." not in d["apiVersion"].split("/")[0]
        or d["apiVersion"].startswith(("apps/", "rbac.", "networking.", "policy/"))
    ]
    assert {"Deployment", "Service", "Role", "NetworkPolicy"} <= {d["kind"] for d in builtin}
    for doc in builtin:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_defaults_leave_optional_parts_out():
    kinds = {d["kind"] for d in render()}
    assert "ReplicaPool" not in kinds
    assert "PrometheusRule" not in kinds
    assert "ServiceMonitor" not in kinds


def test_public_service_exposes_only_the_openai_port():
    services = {s["metadata"]["name"]: s for s in by_kind(render(), "Service")}
    public = services["lf-lorafleet-gateway"]
    assert [p["targetPort"] for p in public["spec"]["ports"]] == ["http"]
    internal = services["lf-lorafleet-gateway-internal"]
    assert public["spec"]["type"] == "ClusterIP"
    assert [p["targetPort"] for p in internal["spec"]["ports"]] == ["internal"]


def test_gateway_is_configured_for_kubernetes_catalog():
    (gateway,) = [d for d in by_kind(render(), "Deployment") if "gateway" in d["metadata"]["name"]]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LORAFLEET_GATEWAY_CATALOG"] == "kubernetes"
    assert env["LORAFLEET_GATEWAY_NAMESPACE"] == "serving"


def _deployment(docs: list[dict[str, Any]], part: str) -> dict[str, Any]:
    (found,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith(part)]
    return found


def _secret_refs(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e["valueFrom"]["secretKeyRef"]
        for c in pod["spec"]["template"]["spec"]["containers"]
        for e in c["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    ]


DATA_TOKEN_REF = {"name": "default-internal", "key": "data-token"}


def test_the_pools_inside_secrets_are_generated_and_the_gateway_reads_only_the_tokens():
    (secret,) = [
        s for s in by_kind(render(), "Secret") if s["metadata"]["name"] == "default-internal"
    ]
    assert set(secret["data"]) == {"vllm-api-key", "agent-token", "data-token"}
    assert len(set(secret["data"].values())) == 3  # three different values
    # tokenReview (the default): the gateway reads only the data-port token (a shared secret
    # in every mode: the data path does not wait on the API server).
    assert _secret_refs(_deployment(render(), "-gateway")) == [DATA_TOKEN_REF]
    secret_mode = render({"internalAuth": {"mode": "secret"}})
    gateway = _deployment(secret_mode, "-gateway")
    assert _secret_refs(gateway) == [
        {"name": "default-internal", "key": "agent-token"},
        DATA_TOKEN_REF,
    ]
    env = {e["name"] for e in gateway["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "LORAFLEET_GATEWAY_REPLICA_DATA_TOKEN" in env
    assert "volumes" not in gateway["spec"]["template"]["spec"]  # no projected token either


def test_operator_may_create_but_never_read_secrets_and_holds_the_token_merged_pools_copy():
    # autoMerge: a merged pool's <pool>-internal Secret gets the agents' token the callers hold
    # (secret mode); the operator creates it and cannot read any Secret.
    docs = render({"internalAuth": {"mode": "secret"}})
    operator = _deployment(docs, "-operator")
    assert _secret_refs(operator) == [
        {"name": "default-internal", "key": "agent-token"},
        DATA_TOKEN_REF,  # copied into a merged pool's Secret, in every mode
    ]
    rules = [
        r for d in by_kind(docs, "Role") if "-operator" in d["metadata"]["name"] for r in d["rules"]
    ]
    secret_verbs = {v for r in rules if "secrets" in r["resources"] for v in r["verbs"]}
    assert secret_verbs == {"create"}
    pool_verbs = {v for r in rules if "replicapools" in r["resources"] for v in r["verbs"]}
    assert {"create", "patch", "delete"} <= pool_verbs
    # tokenReview (the default) with no control API: the operator holds no agents' token
    assert _secret_refs(_deployment(render(), "-operator")) == [DATA_TOKEN_REF]


def test_the_per_tenant_concurrency_cap_reaches_the_gateway_and_zero_turns_it_off():
    def cap(docs: list[dict[str, Any]]) -> str:
        env = _deployment(docs, "-gateway")["spec"]["template"]["spec"]["containers"][0]["env"]
        return str(
            {e["name"]: e.get("value") for e in env}["LORAFLEET_GATEWAY_MAX_CONCURRENT_REQUESTS"]
        )

    assert cap(render()) == "64"
    assert cap(render({"gateway": {"rateLimits": {"maxConcurrentRequests": 0}}})) == "0"
    with pytest.raises(Exception, match="maxConcurrentRequests"):
        render({"gateway": {"rateLimits": {"maxConcurrentRequests": -1}}})


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
        token, env = _projected_token(_deployment(docs, part))
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


def test_operator_tells_the_pod_planner_the_mode_the_callers_and_the_agent_account():
    for mode in ("tokenReview", "secret"):
        operator = _deployment(render({"internalAuth": {"mode": mode}}), "-operator")
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
        f"serving:{_deployment(docs, p)['spec']['template']['spec']['serviceAccountName']}"
        for p in ("-gateway", "-operator")
    }
    assert accounts == set(env["LORAFLEET_OPERATOR_REPLICA_CALLERS"].split(","))


def test_gateway_limits_are_set_from_values_and_reach_the_settings():
    from lorafleet_gateway.settings import GatewaySettings

    limits = {"maxTokens": 8192, "defaultMaxTokens": 512, "maxN": 8, "maxMessages": 64}
    values = {"gateway": {"limits": {**limits, "maxBodyBytes": 4194304}}}
    (gateway,) = [
        d for d in by_kind(render(values), "Deployment") if "gateway" in d["metadata"]["name"]
    ]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = GatewaySettings.model_validate(
        {k.removeprefix("LORAFLEET_GATEWAY_").lower(): v for k, v in env.items()}
    )
    assert (settings.max_tokens_limit, settings.default_max_tokens) == (8192, 512)
    assert (settings.max_n, settings.max_messages, settings.max_body_bytes) == (8, 64, 4194304)
    assert settings.drain_timeout_s == 120 - 5  # cut by the gateway before the kubelet kills


def test_gateway_routing_values_reach_the_router_settings():
    from lorafleet_gateway.runtime import thresholds_from_settings
    from lorafleet_gateway.settings import GatewaySettings

    def thresholds(values: dict[str, Any]) -> Any:
        (gateway,) = [
            d for d in by_kind(render(values), "Deployment") if "gateway" in d["metadata"]["name"]
        ]
        container = gateway["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        return thresholds_from_settings(
            GatewaySettings.model_validate(
                {k.removeprefix("LORAFLEET_GATEWAY_").lower(): v for k, v in env.items()}
            )
        )

    assert thresholds_from_settings(GatewaySettings()) == thresholds({})  # same defaults
    routing = {"policy": "random", "balance": 2, "spill": "least_loaded"}
    routing |= {"maxTokensInFlight": 40000, "maxQueueDepth": 8}
    routing |= {"mergedMaxQueueDepth": 0, "mergedMaxTokensInFlight": 90000}
    t = thresholds({"gateway": {"routing": routing}})
    assert (t.policy, t.balance, t.spill) == ("random", 2.0, "least_loaded")
    assert (t.max_tokens_in_flight, t.max_queue_depth) == (40000, 8)
    assert (t.merged_max_queue_depth, t.merged_max_tokens_in_flight) == (0, 90000)


@pytest.mark.parametrize(
    "routing", [{"policy": "round_robin"}, {"spill": "anywhere"}, {"balance": -1}]
)
def test_bad_gateway_routing_values_are_refused(routing):
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema({"gateway": {"routing": routing}})


def test_gateway_believes_forwarded_headers_only_from_the_configured_proxies(monkeypatch):
    from lorafleet_gateway.settings import GatewaySettings

    def gateway_env(values: dict[str, Any] | None) -> dict[str, str]:
        (gateway,) = [
            d for d in by_kind(render(values), "Deployment") if "gateway" in d["metadata"]["name"]
        ]
        container = gateway["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e["value"] for e in container["env"] if "value" in e}

    assert "LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS" not in gateway_env(None)  # nobody's
    env = gateway_env({"gateway": {"forwardedAllowIps": "10.42.0.0/16"}})
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    monkeypatch.setenv(
        "LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS", env["LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS"]
    )
    assert GatewaySettings().forwarded_allow_ips == "10.42.0.0/16"


def test_unknown_gateway_limit_is_refused():
    with pytest.raises(Exception, match=r"maxTokenz|additional"):
        helm_python.Chart.load(CHART).validate_schema({"gateway": {"limits": {"maxTokenz": 1}}})


def test_gateway_role_is_read_only():
    roles = {r["metadata"]["name"]: r for r in by_kind(render(), "Role")}
    verbs = {v for rule in roles["lf-lorafleet-gateway"]["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}


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


def test_created_replica_pool_passes_the_crd_schema_and_rules():
    (pool,) = by_kind(render(ALL_ON), "ReplicaPool")
    schema = crd_validation.schema_of("ReplicaPool")
    assert crd_validation.validate(schema, pool) == []


def test_a_replica_pool_whose_extra_args_open_vllm_renders_an_object_the_crd_refuses():
    spec: dict[str, Any] = copy.deepcopy(POOL_SPEC)
    spec.setdefault("engine", {})["extraArgs"] = ["--trust-remote-code"]
    values = {**ALL_ON, "replicaPool": {"create": True, "name": "main", "spec": spec}}
    (pool,) = by_kind(render(values), "ReplicaPool")
    (problem,) = crd_validation.validate(crd_validation.schema_of("ReplicaPool"), pool)
    assert problem.startswith("spec.engine.extraArgs: extraArgs may not set flags"), problem


def test_dashboard_and_alerts_ship_with_monitoring_enabled():
    docs = render(ALL_ON)
    (dashboard,) = by_kind(docs, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "lorafleet_gateway_ttft_seconds_bucket" in dashboard["data"]["lorafleet.json"]
    (rule,) = by_kind(docs, "PrometheusRule")
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules if "alert" in r}
    assert {"LorafleetTTFTp95AboveTarget", "LorafleetAdapterThrashing"} <= alerts
    records = {r["record"] for r in rules if "record" in r}
    assert "lorafleet:cost_per_million_tokens:rate5m" in records
    assert "lorafleet:cost_per_million_tokens:rate5m" in dashboard["data"]["lorafleet.json"]


def test_cost_rule_takes_the_configured_gpu_price():
    monitoring = {"serviceMonitor": True, "prometheusRule": True, "gpuHourlyPrice": 4.75}
    values = {**ALL_ON, "monitoring": monitoring}
    (rule,) = by_kind(render(values), "PrometheusRule")
    (cost,) = [
        r
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if r.get("record") == "lorafleet:cost_per_million_tokens:rate5m"
    ]
    assert "* 1 * 4.75 / 3600" in cost["expr"]


@pytest.mark.parametrize(
    "values",
    [
        {"gateway": {"replicas": 0}},
        {"operator": {"replicas": 2}},
        {"gateway": {"port": "eighty"}},
        {"unknownKey": True},
        # A pool's name names its StatefulSet and Service (models.POOL_NAME).
        {"replicaPool": {"name": "7b"}},
        {"replicaPool": {"name": "p" * 53}},
        {"gateway": {"pool": "llama.7b"}},
        {"gateway": {"pools": ["ok", "9lives"]}},
    ],
)
def test_values_schema_refuses_bad_values(values):
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmError):
        chart.validate_schema(values)


def test_replica_pool_needs_a_base_model():
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmError, match="baseModel"):
        chart.render({"replicaPool": {"create": True, "spec": {}}}, name="lf", namespace="x")


def test_chart_crds_match_generated_crds():
    generated = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    shipped = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert shipped == generated
    _, mismatch, errors = filecmp.cmpfiles(ROOT / "crds", CHART / "crds", generated, shallow=False)
    assert (mismatch, errors) == ([], []), "run `make crds` to refresh charts/lorafleet/crds"


def test_operator_runs_standalone_in_the_release_namespace():
    (op,) = [d for d in by_kind(render(), "Deployment") if "operator" in d["metadata"]["name"]]
    container = op["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python3", "-m", "lorafleet_operator"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LORAFLEET_OPERATOR_NAMESPACES"] == "serving"
    assert env["LORAFLEET_OPERATOR_LIVENESS_ENDPOINT"].endswith(":8080/healthz")
    assert op["spec"]["replicas"] == 1


def test_operator_replica_capacity_value_reaches_its_settings():
    from lorafleet_operator.settings import OperatorSettings

    def capacity(values: dict[str, Any] | None) -> float:
        (op,) = [
            d for d in by_kind(render(values), "Deployment") if "operator" in d["metadata"]["name"]
        ]
        env = {
            e["name"]: e.get("value")
            for e in op["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        value = env["LORAFLEET_OPERATOR_REPLICA_TOKENS_PER_SECOND"]
        return OperatorSettings.model_validate(
            {"replica_tokens_per_second": value}
        ).replica_tokens_per_second

    assert capacity(None) == OperatorSettings().replica_tokens_per_second == 640
    assert capacity({"operator": {"replicaTokensPerSecond": 1500}}) == 1500
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema({"operator": {"replicaTokensPerSecond": 0}})


def test_dashboard_filters_by_namespace_and_pool_over_rate_interval():
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"namespace", "pool"} <= variables
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for expr in exprs:
        assert not re.search(r"\[\d+[smh]\]", expr), f"fixed range in {expr}"
        for selector in re.findall(r"lorafleet_[a-z_]+(\{[^}]*\})?", expr):
            assert 'namespace=~"$namespace"' in selector, expr
    agent = [e for e in exprs if "lorafleet_agent_" in e]
    assert agent
    assert all('pool=~"$pool"' in e for e in agent)
    assert any("stream_error" in e for e in exprs)


def test_dashboard_and_alerts_only_query_metrics_that_exist():
    # A renamed metric must not leave a silent, empty panel or an alert that never fires.
    docs = render(ALL_ON)
    (rule,) = by_kind(docs, "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    dashboard = (CHART / "files" / "dashboard.json").read_text()
    queried = set(re.findall(r"lorafleet_[a-z_]+", " ".join(exprs) + dashboard))
    assert queried, "no lorafleet metric found in the dashboard or alerts"
    assert queried - series_names(exported_families()) == set()


# --- production values (ci/*-values.yaml) --------------------------------------------------------


@pytest.mark.parametrize("path", CI_VALUES, ids=lambda p: p.name)
def test_ci_values_render_and_validate(path):
    values = yaml.safe_load(path.read_text())
    helm_python.Chart.load(CHART).validate_schema(values)
    report = helm_python.lint(str(CHART), values, strict=True)
    assert [m for m in report["messages"] if m["severity"] >= 2] + report["errors"] == []
    others = validate_builtin(render(values))
    for doc in others:
        if doc["kind"] == "ReplicaPool":
            assert crd_validation.validate(crd_validation.schema_of("ReplicaPool"), doc) == []
        elif doc["kind"] == "HTTPRoute":
            rule = doc["spec"]["rules"][0]
            assert rule["backendRefs"] == [{"name": "lf-lorafleet-gateway", "port": 80}]
            assert doc["spec"]["parentRefs"][0]["name"] == "public"
        else:
            assert doc["apiVersion"].startswith("monitoring.coreos.com/"), doc["kind"]


def test_every_chart_pod_runs_restricted_with_runtime_default_seccomp():
    for values in [{}, *map(yaml.safe_load, (p.read_text() for p in CI_VALUES))]:
        for deploy in by_kind(render(values), "Deployment"):
            pod = deploy["spec"]["template"]["spec"]
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert pod["securityContext"]["runAsNonRoot"] is True
            for c in pod["containers"]:
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
                assert c["command"][0] == "python3"


def test_monitoring_labels_reach_every_monitoring_object():
    docs = render(ci_values("gpu-cluster-values.yaml"))
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert by_kind(docs, kind), kind
        for obj in by_kind(docs, kind):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind
            assert obj["metadata"]["labels"]["team"] == "ml-platform", kind  # commonLabels
    (rule,) = by_kind(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["role"] == "alert-rules"
    (dashboard,) = by_kind(docs, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_folder"] == "lorafleet"
    monitors = {m["metadata"]["name"]: m for m in by_kind(docs, "ServiceMonitor")}
    assert monitors["lf-lorafleet-gateway"]["spec"]["endpoints"][0]["interval"] == "30s"


def test_network_policy_peers_take_namespace_selectors():
    docs = render(ci_values("gpu-cluster-values.yaml"))
    policies = {p["metadata"]["name"]: p for p in by_kind(docs, "NetworkPolicy")}
    replicas = policies["lf-lorafleet-replicas"]["spec"]["ingress"]
    monitoring = replicas[2]
    assert monitoring["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    assert [p["port"] for p in monitoring["ports"]] == [8101]  # metrics only, not the data port
    gateway = policies["lf-lorafleet-gateway"]["spec"]["ingress"]
    assert gateway[0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "ingress-nginx"
    }
    assert [p["port"] for p in gateway[1]["ports"]] == [9090]
    # Defaults: Prometheus in any namespace may scrape.
    default = {p["metadata"]["name"]: p for p in by_kind(render(), "NetworkPolicy")}
    peer = default["lf-lorafleet-replicas"]["spec"]["ingress"][2]["from"][0]
    assert peer["namespaceSelector"] == {}


def test_placement_env_annotations_and_pull_secrets_are_rendered_not_dropped():
    values = ci_values("gpu-cluster-values.yaml")
    docs = render(values)
    deployments = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
    gw = deployments["lf-lorafleet-gateway"]["spec"]["template"]
    spec, g = gw["spec"], values["gateway"]
    assert spec["imagePullSecrets"] == [{"name": "ghcr-pull"}]
    assert spec["nodeSelector"] == g["nodeSelector"]
    assert spec["tolerations"] == g["tolerations"]
    assert spec["topologySpreadConstraints"] == g["topologySpreadConstraints"]
    assert spec["priorityClassName"] == "lorafleet-gateway"
    assert gw["metadata"]["annotations"] == g["podAnnotations"]
    assert gw["metadata"]["labels"]["tier"] == "edge"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["LORAFLEET_GATEWAY_RATE_LIMIT_BACKEND"]["value"] == "redis"
    assert env["LORAFLEET_GATEWAY_RATE_LIMIT_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "lorafleet-redis",
        "key": "redis-password",
    }
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    public = services["lf-lorafleet-gateway"]
    assert public["metadata"]["annotations"] == g["service"]["annotations"]
    assert public["metadata"]["labels"]["exposure"] == "public"
    assert services["lf-lorafleet-gateway-internal"]["metadata"]["annotations"] == {
        "example.com/owner": "sre"
    }
    (ingress,) = by_kind(docs, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    op = deployments["lf-lorafleet-operator"]["spec"]["template"]["spec"]
    assert op["tolerations"] == values["operator"]["tolerations"]
    assert op["priorityClassName"] == "system-cluster-critical"


def test_gateway_survives_disruptions_and_drains_on_shutdown():
    docs = render()
    (pdb,) = [p for p in by_kind(docs, "PodDisruptionBudget") if "gateway" in p["metadata"]["name"]]
    assert pdb["spec"]["maxUnavailable"] == 1
    (gw,) = [d for d in by_kind(docs, "Deployment") if "gateway" in d["metadata"]["name"]]
    pod = gw["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    container = pod["containers"][0]
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 10}}
    assert pod["terminationGracePeriodSeconds"] == 130
    # Readiness = can answer (lorafleet's JSON 503 when no replica), on the public port.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_notes_warn_about_per_pod_limits_and_unselected_monitors():
    text = notes({"monitoring": {"serviceMonitor": True}})
    assert "up to 2x its limit" in text
    assert "maxConcurrentRequests (64) is per gateway pod" in text
    assert "monitoring.labels is empty" in text
    uncapped = notes({"gateway": {"rateLimits": {"maxConcurrentRequests": 0}}})
    assert "maxConcurrentRequests" not in uncapped
    quiet = notes(ci_values("gpu-cluster-values.yaml"))
    assert "WARNING" not in quiet
    assert "monitoring.labels is empty" not in quiet


def test_chart_names_its_maintainers():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["maintainers"][0]["name"]
    assert chart["kubeVersion"].startswith(">=1.30")


@pytest.mark.parametrize(
    "values",
    [
        {"gateway": {"rateLimit": {}}},
        {"gateway": {"rateLimits": {"redis": {"uri": "redis://x"}}}},
        {"gateway": {"service": {"anotations": {}}}},
        {"gateway": {"ingress": {"hosts": [{"hots": "x"}]}}},
        {"gateway": {"tolerations": [{"efect": "NoSchedule"}]}},
        {"gateway": {"resources": {"request": {"cpu": "1"}}}},
        {"gateway": {"affinity": {"nodeAfinity": {}}}},
        {"operator": {"extraEnv": [{"value": "no name"}]}},
        {"networkPolicy": {"monitoringPeer": []}},
        {"networkPolicy": {"monitoringPeers": [{"namespaceSelecter": {}}]}},
        {"monitoring": {"label": {"release": "x"}}},
        {"imagePullSecrets": [{"nam": "x"}]},
        {"replicaPool": {"creat": True}},
        {"internalAuth": {"mod": "secret"}},
        {"internalAuth": {"mode": "none"}},
        {"internalAuth": {"tokenExpirationSeconds": 60}},
    ],
)
def test_values_schema_refuses_typos_at_every_level(values):
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema(values)


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
    assert pod["volumes"][0]["secret"]["secretName"] == "ctl"
    (replica_token,) = [
        e for e in pod["containers"][0]["env"] if e["name"] == "LORAFLEET_OPERATOR_REPLICA_TOKEN"
    ]
    assert replica_token["valueFrom"]["secretKeyRef"] == {
        "name": "default-internal",
        "key": "agent-token",
    }
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


# --- the canary probe CronJob ------------------------------------------------------------------


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
