"""How every read command prints: `-o table` (default), `wide`, `json` or `yaml`.

Tables of lorafleet objects use the CRDs' own printer columns (lorafleet_core.api.crd_resources), so
`lorafleet adapter list` shows what `kubectl get lora` shows, and `-o wide` adds the priority-1
columns (the Ready or Deployed condition's reason and message). JSON and YAML print the objects
themselves (a list for list commands), ready for `jq`/`yq`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import yaml

from lorafleet_core.api.crd_resources import RESOURCES, PrinterColumn

FORMATS = ("table", "wide", "json", "yaml")
NONE = "<none>"


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="table (default), wide (adds reasons and messages), json or yaml",
    )


@dataclass(frozen=True)
class Column:
    """A table column: a header and how to get the cell from an object."""

    name: str
    cell: Callable[[Mapping[str, Any]], str]
    wide_only: bool = False


# `.a.b.c` or `.a.b[?(@.type=="X")].c`: the two JSONPath forms the CRD columns use.
_FILTER = re.compile(r'^(?P<list>[.\w]+)\[\?\(@\.(?P<key>\w+)=="(?P<value>[^"]*)"\)\](?P<rest>.*)$')


def json_path(obj: Any, path: str) -> Any:
    """The first match of a printer column's JSONPath, None when nothing matches (the API
    server's table convertor prints that as <none>)."""
    m = _FILTER.match(path)
    if m:
        items = json_path(obj, m["list"])
        if not isinstance(items, list):
            return None
        for item in items:
            if isinstance(item, Mapping) and str(item.get(m["key"])) == m["value"]:
                return json_path(item, m["rest"]) if m["rest"] else item
        return None
    value = obj
    for part in path.strip(".").split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def age(timestamp: Any, now: datetime | None = None) -> str:
    """kubectl's short age: 45s, 12m, 5h, 3d."""
    if not isinstance(timestamp, str) or not timestamp:
        return NONE
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return NONE
    seconds = max(int(((now or datetime.now(UTC)) - then).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def printer_column(col: PrinterColumn) -> Column:
    def cell(obj: Mapping[str, Any]) -> str:
        value = json_path(obj, col.json_path)
        if col.type == "date":
            return age(value)
        return NONE if value is None or value == "" else str(value)

    return Column(col.name.upper(), cell, wide_only=col.priority > 0)


def kind_columns(kind: str) -> list[Column]:
    """NAME, then the CRD's printer columns for `kind`."""
    (resource,) = [r for r in RESOURCES if r.kind == kind]
    name = Column("NAME", lambda o: str((o.get("metadata") or {}).get("name", NONE)))
    return [name, *(printer_column(c) for c in resource.columns)]


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], wide: bool) -> str:
    shown = [c for c in columns if wide or not c.wide_only]
    cells = [[c.name for c in shown]] + [[c.cell(r) for c in shown] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(shown))]
    lines = ["   ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def emit(
    data: Any,
    fmt: str,
    columns: Sequence[Column] | None = None,
    out: TextIO | None = None,
) -> None:
    """Print `data` (an object or a list of objects) in `fmt`. Tables need `columns`; a single
    object prints as a one-row table."""
    stream = out or sys.stdout
    if fmt == "json":
        stream.write(json.dumps(data, indent=2, default=str) + "\n")
    elif fmt == "yaml":
        stream.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        if columns is None:
            raise ValueError("a table needs columns")
        rows = data if isinstance(data, list) else [data]
        if not rows:
            print("No resources found.", file=sys.stderr)
            return
        stream.write(render_table(rows, columns, wide=fmt == "wide") + "\n")
