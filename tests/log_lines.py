"""Reading a lorafleet process's log: every line must be one JSON object (lorafleet_core.logs).

`json_lines(text)` fails naming the first line that is not JSON or lacks a field every line has,
so a plain line slipping in (uvicorn's own handler, a traceback printed by Python, kopf's text
formatter) fails the test that reads the log.
"""

from __future__ import annotations

import json
import re
from typing import Any

# What every line has; `time` is RFC 3339 in UTC with milliseconds.
REQUIRED = ("time", "level", "logger", "message")
RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            doc = json.loads(line)
        except ValueError:
            raise AssertionError(f"log line {number} is not JSON: {line[:300]!r}") from None
        assert isinstance(doc, dict), f"log line {number} is not an object: {line[:300]!r}"
        missing = [k for k in REQUIRED if k not in doc]
        assert not missing, f"log line {number} lacks {missing}: {line[:300]!r}"
        assert RFC3339_UTC.fullmatch(doc["time"]), f"log line {number}: time {doc['time']!r}"
        out.append(doc)
    assert out, "the log is empty"
    return out
