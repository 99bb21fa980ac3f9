"""Reading a lorafleet process's log: every line must be one JSON object (lorafleet_core.logs).

`json_lines(text)` fails naming the first line that is not JSON or lacks a field every line has,
so a plain line slipping in (uvicorn's own handler, a traceback printed by Python, kopf's text
formatter) fails the test that reads the log.
"""

from __future__ import annotations

import json
from typing import Any

from lorafleet_core.logs import RFC3339_CHECK

# What every line has; `time` is RFC 3339 in UTC with milliseconds.
REQUIRED = ("time", "level", "logger", "message")


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
        assert RFC3339_CHECK.fullmatch(doc["time"]), f"log line {number}: time {doc['time']!r}"
        out.append(doc)
    assert out, "the log is empty"
    return out
