"""The isolation test's eight canaries: the three demo ones plus five more, each its own marker."""

from __future__ import annotations

from lorafleet_demo.assets import DEFAULT_MARKERS

CANARY_MARKERS: dict[str, str] = {
    **DEFAULT_MARKERS,
    "heron": "HERON-2",
    "bison": "BISON-4",
    "lynx": "LYNX-5",
    "moose": "MOOSE-6",
    "panda": "PANDA-8",
}
