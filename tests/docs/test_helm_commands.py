"""Every `helm install|upgrade|template ... charts/lorafleet` command in the README and docs/
renders: its `--set`/`--set-json` keys and values and its `-f` files pass the chart's
values.schema.json (unknown keys refused at every level, patterns such as the image
repository's). A renamed value, or a placeholder the schema refuses, otherwise fails on the
first copy-paste on a real cluster."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.docs.markdown import doc_lines

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "e2e" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
HELM = re.compile(r"\bhelm\s+(install|upgrade|template)\s+(.*)$")


def helm_commands(path: Path) -> Iterator[tuple[int, str]]:
    """(line, the words after `helm install|upgrade|template`) in the file's code blocks,
    backslash continuations joined."""
    for number, line, in_code in doc_lines(path):
        match = HELM.search(line) if in_code else None
        if match:
            yield number, match.group(2)


def _put(values: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    values[last] = value


def values_of(words: str) -> tuple[str, str, dict[str, Any]] | None:
    """(release, namespace, values) of a command on this repo's chart; None for another chart."""
    tokens = shlex.split(words, comments=True)
    tokens = tokens[: next((i for i, t in enumerate(tokens) if t in {"|", "&&", ";"}), None)]
    if len(tokens) < 2 or tokens[1].rstrip("/") != "charts/lorafleet":
        return None
    values: dict[str, Any] = {}
    namespace = "default"
    rest = iter(tokens[2:])
    for token in rest:
        flag, _, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if flag in {"--set", "--set-string", "--set-json"}:
            key, _, raw = (inline or next(rest)).partition("=")
            if flag == "--set-json":
                value: Any = json.loads(raw)
            elif flag == "--set-string":
                value = raw
            else:
                value = yaml.safe_load(raw) if raw else ""
            _put(values, key, value)
        elif flag in {"-f", "--values"}:
            loaded = yaml.safe_load((ROOT / (inline or next(rest))).read_text()) or {}
            values = {**values, **loaded}
        elif flag in {"-n", "--namespace"}:
            namespace = inline or next(rest)
    return tokens[0], namespace, values


def documented() -> list[tuple[str, str]]:
    # Commands on another chart (e.g. kube-prometheus-stack) are not this test's to render.
    found = [
        (f"{path.relative_to(ROOT)}:{number}", words)
        for path in DOCS
        for number, words in helm_commands(path)
        if values_of(words) is not None
    ]
    assert len(found) >= 2, found  # the README's install and the canary upgrade at least
    return found


@pytest.mark.parametrize(("where", "words"), documented(), ids=lambda x: str(x)[:40])
def test_documented_helm_command_renders_the_chart(where: str, words: str) -> None:
    parsed = values_of(words)
    assert parsed is not None, where  # documented() keeps only this repo's chart
    release, namespace, values = parsed
    rendered = helm_python.Chart.load(ROOT / "charts" / "lorafleet").render(
        values, name=release, namespace=namespace
    )
    assert any(path.endswith("templates/gateway.yaml") for path in rendered), where


def test_a_value_the_schema_refuses_is_found(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```\n"
        "helm install lf charts/lorafleet -n x \\\n"
        "  --set image.repository=REGISTRY/lorafleet --set monitoring.serviceMontor=true\n"
        "```\n"
    )
    [(_, words)] = list(helm_commands(doc))
    parsed = values_of(words)
    assert parsed is not None
    with pytest.raises(helm_python.HelmError) as refused:
        helm_python.Chart.load(ROOT / "charts" / "lorafleet").render(
            parsed[2], name=parsed[0], namespace=parsed[1]
        )
    assert "image/repository" in str(refused.value)
