"""The generated reference pages: every setting of the five settings classes and every metric
the registries export, written as markdown from the classes and registries themselves.

    .venv/bin/python -m tests.docs.reference_pages          # check: exit 1 if a page drifted
    .venv/bin/python -m tests.docs.reference_pages --write  # regenerate (`make docs`)

`tests/docs/test_reference_pages.py` runs the check, so a setting or metric added, renamed or
re-described without regenerating fails the suite."""

from __future__ import annotations

import argparse
import enum
import json
import re
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import annotated_types
import helm_python
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from lorafleet_agent.settings import AgentSettings
from lorafleet_core.logs import LogSettings
from lorafleet_gateway.metrics import GatewayMetrics
from lorafleet_gateway.settings import GatewaySettings
from lorafleet_loadtest.probe.canary import AliasTally, prometheus_textfile
from lorafleet_operator.metrics import OperatorMetrics
from lorafleet_operator.settings import OperatorSettings
from lorafleet_operator.sync import FleetSync
from lorafleet_standalone.up_options import StandaloneSettings
from tests.exported_metrics import agent_metrics

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_PAGE = ROOT / "docs" / "reference" / "settings.md"
METRICS_PAGE = ROOT / "docs" / "reference" / "metrics.md"
TEMPLATES = ROOT / "charts" / "lorafleet" / "templates"
COMMAND = ".venv/bin/python -m tests.docs.reference_pages --write"


@dataclass(frozen=True)
class Component:
    title: str
    cls: type[BaseSettings]
    where: str  # who sets the variables in a deployment


COMPONENTS = (
    Component(
        "Gateway",
        GatewaySettings,
        "On a cluster the chart sets the variables its values decide (column *chart*); "
        "`gateway.extraEnv` sets any other.",
    ),
    Component(
        "Agent",
        AgentSettings,
        "On a cluster the operator sets them in each replica pod from the ReplicaPool "
        "(`spec.engine`, `spec.cache`, the pool's Secret); `lorafleet up` sets them from the "
        "pool's manifest. Set them yourself only to run the replica image by hand.",
    ),
    Component(
        "Operator and control API",
        OperatorSettings,
        "On a cluster the chart sets the variables its values decide (column *chart*); "
        "`operator.extraEnv` sets any other.",
    ),
    Component(
        "Logging (every process)",
        LogSettings,
        "Read by the gateway, the agent, the operator and the control API at start "
        "(`lorafleet_core.logs`). The chart sets it on the gateway and the operator from "
        "`logFormat`; the operator passes a value other than the default on to its replica "
        "pods; `lorafleet up`'s children inherit it from `up`'s environment.",
    ),
    Component(
        "Standalone (`lorafleet up`)",
        StandaloneSettings,
        "Read by `lorafleet up` from its own environment, beside its command line.",
    ),
)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None))
    if origin is tuple:
        return "JSON list"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: FieldInfo) -> str:
    marks = (
        (annotated_types.Ge, "ge", "≥"),
        (annotated_types.Gt, "gt", ">"),
        (annotated_types.Le, "le", "≤"),
        (annotated_types.Lt, "lt", "<"),
    )
    parts = []
    for meta in field.metadata:
        for kind, attribute, sign in marks:
            if isinstance(meta, kind):
                value = getattr(meta, attribute)
                parts.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value}")
        pattern = getattr(meta, "pattern", None)
        if pattern:
            parts.append(f"matching `{pattern}`")
    return ", ".join(parts)


def _default(field: FieldInfo) -> str:
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return f"`{json.dumps(list(value))}`"
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value:,} ({value >> 20:,} MiB)" if value < 1 << 30 else f"{value >> 30} GiB"
    if isinstance(value, int):
        return f"{value:,}" if value >= 10_000 else str(value)
    if value == "":
        return "empty"
    return f"`{value}`"


def variables(cls: type[BaseSettings], name: str, field: FieldInfo) -> list[str]:
    prefix = str(cls.model_config.get("env_prefix", ""))
    alias = field.validation_alias
    choices = getattr(alias, "choices", [alias] if isinstance(alias, str) else [])
    return [str(c).upper() for c in choices] or [(prefix + name).upper()]


# Values that switch on every variable the chart can set (it renders each mode once).
CHART_PROFILES: tuple[dict[str, Any], ...] = tuple(
    {
        "internalAuth": {"mode": mode},
        "gateway": {
            "forwardedAllowIps": "10.0.0.0/8",
            "rateLimits": {
                "backend": "redis",
                "redis": {"passwordSecret": {"name": "r", "key": "p"}},
            },
        },
        "operator": {"control": {"enabled": True, "tokenSecret": "control"}},
    }
    for mode in ("secret", "tokenReview")
)


def chart_env_names() -> set[str]:
    """The variables the chart's Deployments set, rendered with every option on."""
    chart = helm_python.Chart.load(ROOT / "charts" / "lorafleet")
    names: set[str] = set()
    for values in CHART_PROFILES:
        for path, text in chart.render(values, name="lorafleet", namespace="lorafleet").items():
            if not path.endswith(".yaml"):
                continue
            for doc in yaml.safe_load_all(text):
                if doc and doc.get("kind") == "Deployment":
                    for container in doc["spec"]["template"]["spec"]["containers"]:
                        names |= {e["name"] for e in container.get("env", [])}
    return names


def chart_value_paths() -> dict[str, str]:
    """Variable -> the chart values it is rendered from, read from the templates' env lists
    (`- {name: X, value: {{ .Values.a.b }}}`, or `- name: X` and the lines under it; inside
    `{{ with .Values.a }}`, `.b` is `a.b`)."""
    found: dict[str, str] = {}
    for path in sorted(TEMPLATES.glob("*")):
        lines = path.read_text().splitlines()
        scopes: list[str | None] = []
        for i, line in enumerate(lines):
            for keyword, rest in re.findall(
                r"\{\{-?\s*(with|if|range|define|block|end)\b([^}]*)\}\}", line
            ):
                if keyword == "end":
                    if scopes:
                        scopes.pop()
                elif keyword == "with" and rest.strip().startswith(".Values."):
                    scopes.append(rest.strip().split()[0].removeprefix(".Values."))
                else:
                    scopes.append(None)
            match = re.match(r"(\s*)- (?:\{name: |name: )(LORAFLEET_[A-Z0-9_]+)(.*)", line)
            if not match:
                continue
            indent, name, value = match.groups()
            for more in lines[i + 1 :]:  # `valueFrom:` and what it names
                if not more.startswith(indent + "  "):
                    break
                value += " " + more
            scope = next((s for s in reversed(scopes) if s), None)
            paths = re.findall(r"\.Values\.([\w.]+)", value)
            for action in re.findall(r"\{\{(.*?)\}\}", value) if scope else []:
                paths += [
                    f"{scope}.{p}"
                    for p in re.findall(r"(?<![\w.$])\.([A-Za-z]\w*(?:\.\w+)*)", action)
                    if not p.startswith(("Values", "Release", "Chart", "Capabilities"))
                ]
                if re.fullmatch(r"-?\s*\.\s*(\|.*)?", action.strip()):
                    paths.append(scope)
            if paths:
                found.setdefault(name, ", ".join(f"`{p}`" for p in dict.fromkeys(paths)))
    return found


def chart_values() -> dict[str, str]:
    """Variable -> how the chart sets it: the value path, or "set by the chart" where it
    derives the value itself (a mounted file's path, the release's namespace)."""
    paths = chart_value_paths()
    return {name: paths.get(name, "set by the chart") for name in chart_env_names()}


def settings_page() -> str:
    chart = chart_values()
    lines = [
        "# Settings reference",
        "",
        "<!-- Generated from the settings classes; do not edit by hand. -->",
        "",
        "Every process reads its settings from environment variables with its component's "
        "prefix; unknown variables are ignored, and a value that fails its type or bound stops "
        "the process at start with the variable named. This page is generated from the five "
        f"settings classes (`{COMMAND}`, or `make docs`); `tests/docs/test_reference_pages.py` "
        "fails when it and the classes disagree. Why each default is what it is: the "
        "component's reference page and the [design records](../design/README.md).",
        "",
        "A variable the chart sets from a value cannot also be set through `extraEnv` (the "
        "render fails naming it): set the chart value instead "
        "([deploy guide](../guides/deploy.md#extra-environment-variables)).",
    ]
    for component in COMPONENTS:
        cls = component.cls
        prefix = str(cls.model_config.get("env_prefix", ""))
        lines += [
            "",
            f"## {component.title}",
            "",
            f"`{prefix}*`, read by `{cls.__module__}.{cls.__name__}`. {component.where}",
            "",
        ]
        with_chart = issubclass(component.cls, GatewaySettings | OperatorSettings | LogSettings)
        head = "| variable | type | default | chart | meaning |"
        lines += [head if with_chart else head.replace(" chart |", "")]
        lines += ["|---|---|---|---|---|" if with_chart else "|---|---|---|---|"]
        for name, field in cls.model_fields.items():
            names = variables(cls, name, field)
            kind = _type_name(field.annotation)
            bounds = _bounds(field)
            cells = [
                "<br>".join(f"`{n}`" for n in names),
                f"{kind}, {bounds}" if bounds else kind,
                _default(field),
            ]
            if with_chart:
                cells.append(next((chart[n] for n in names if n in chart), ""))
            description = (field.description or "").replace("|", "\\|").replace("\n", " ")
            cells.append(description)
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


def _families(registry: CollectorRegistry) -> Iterator[Family]:
    labels_of: dict[str, tuple[str, ...]] = {}
    for collector, names in registry._collector_to_names.items():
        for name in names:
            labels_of.setdefault(name, tuple(getattr(collector, "_labelnames", ())))
    for family in registry.collect():
        seen = [k for s in family.samples for k in s.labels if k not in {"le", "quantile"}]
        declared = labels_of.get(family.name, ()) or labels_of.get(family.name + "_total", ())
        yield Family(
            family.name,
            family.type,
            tuple(dict.fromkeys([*declared, *seen])),
            family.documentation,
        )


class _EmptyIndex:
    adapters: Mapping[str, Any] = {}
    aliases: Mapping[str, Any] = {}


class _EmptyFleet:
    """A namespace with no objects: the operator's index gauges then show their labels."""

    index = _EmptyIndex()


def metric_sections() -> list[tuple[str, str, list[Family]]]:
    """(title, where it is scraped, families) per component."""
    gateway = GatewayMetrics()
    gateway.tenants.observe("tenant", over_target=False)  # its series exist once it has one
    fleets = cast(Mapping[str, FleetSync], {"namespace": _EmptyFleet()})
    operator = OperatorMetrics(lambda: fleets)
    tally = AliasTally(hits=1, ttfts=[0.1], answered={"adapter": 1})
    canary_text = prometheus_textfile({"acme/bot:prod": tally}, 0, 0.0)
    agent = agent_metrics()  # its opt-in families too, listed with the setting that turns them on
    canary = [
        Family(
            f.name,
            f.type,
            tuple(dict.fromkeys(k for s in f.samples for k in s.labels)),
            f.documentation,
        )
        for f in text_string_to_metric_families(canary_text)
    ]
    return [
        (
            "Gateway",
            "the gateway's internal port (`/metrics`, 9090)",
            list(_families(gateway.registry)),
        ),
        (
            "Agent",
            "each replica's internal port (`/metrics`, 8101)",
            list(_families(agent.registry)),
        ),
        ("Operator", "the operator's metrics port (9090)", list(_families(operator.registry))),
        ("Canary probe", "the textfile `lorafleet canary --textfile` writes", canary),
    ]


SERIES = {
    "counter": "`{0}_total`",
    "histogram": "`{0}_bucket`, `{0}_sum`, `{0}_count`",
    "summary": "`{0}_sum`, `{0}_count`",
}


ENGINE_SECTION = [
    "## Engine (vLLM)",
    "",
    "Each replica's internal port (`/metrics`, 8101) also serves vLLM's own `vllm:` families "
    "after the agent's (lorafleet_agent.engine_metrics): vLLM listens on the pod's loopback, "
    "so this is where the PodMonitor, the dashboard's Engine row, the engine alerts and "
    "external schedulers read them. Names and labels are vLLM's (see its metrics docs); the "
    "engine's process and Python series are left out. The Gateway API Inference Extension's "
    "model-server protocol reads `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` and "
    "`vllm:lora_requests_info` from a replica's pod on this port and path. When vLLM does not "
    "answer within 2 s the scrape carries the agent's series only; `/metrics?engine=false` "
    "never asks it (the preStop drain hook reads that).",
    "",
    "Bounded: `_created` samples are dropped, and of `vllm:lora_requests_info` only the newest "
    "sample passes (vLLM keeps one per set of running and waiting adapters it has seen). One "
    "CPU replica of vLLM 0.32 after one adapter request served 316 `vllm:` samples next to "
    "the agent's 28 (before: the agent's 28 plus 11 `_created`), and the agent now adds 3 "
    "residency counts; most are histogram buckets, and the count does not grow with tenants "
    "or adapters (the opt-in residency info adds 2 series whose labels do).",
]


def metrics_page() -> str:
    lines = [
        "# Metrics reference",
        "",
        "<!-- Generated from the metric registries; do not edit by hand. -->",
        "",
        "Every Prometheus metric lorafleet exports, generated from the registries the "
        f"processes serve (`{COMMAND}`, or `make docs`); `tests/docs/test_reference_pages.py` "
        "fails when it and the registries disagree. What to watch and which alert fires on "
        "what: the [operate guide](../guides/operate.md) and the [runbook](../runbook.md).",
        "",
        "The chart's Grafana dashboard (`charts/lorafleet/files/dashboard.json`) is checked "
        "against these series in the suite: `tests/standalone/test_up_e2e.py` has a real "
        "Prometheus scrape a running `lorafleet up` (its gateway's internal port and each "
        "replica's agent, labelled as the chart's ServiceMonitor and PodMonitor label them, "
        "with the chart's recording rules loaded) and runs every panel's queries and the "
        '`label_values` variables with "All" selected and `$__rate_interval` = 1m: every '
        "query must parse and every panel must return a series, except the panels that "
        "test names with the reason (the operator's, which `up` does not run; evictions and "
        "verification rejections, which the demo never has).",
    ]
    for title, where, families in metric_sections():
        lines += ["", f"## {title}", "", f"Scraped from {where}.", ""]
        lines += ["| series | type | labels | meaning |", "|---|---|---|---|"]
        for f in sorted(families, key=lambda f: f.name):
            series = SERIES.get(f.kind, "`{0}`").format(f.name)
            labels = ", ".join(f"`{label}`" for label in f.labels) or "–"
            meaning = f.help.replace("|", "\\|")
            lines.append(f"| {series} | {f.kind} | {labels} | {meaning} |")
    lines += ["", *ENGINE_SECTION]
    return "\n".join(lines) + "\n"


def pages() -> dict[Path, str]:
    return {SETTINGS_PAGE: settings_page(), METRICS_PAGE: metrics_page()}


def drifted() -> list[Path]:
    return [p for p, text in pages().items() if not p.exists() or p.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="regenerate the pages")
    args = parser.parse_args(argv)
    if args.write:
        for path, text in pages().items():
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    stale = drifted()
    for path in stale:
        print(f"{path.relative_to(ROOT)} is out of date: run {COMMAND}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
