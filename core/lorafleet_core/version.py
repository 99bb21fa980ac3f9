"""lorafleet's version, from the installed distribution (pyproject.toml is the one source)."""

from __future__ import annotations

import importlib.metadata


def version() -> str:
    """The installed `lorafleet` version; `0+unknown` when running from an uninstalled tree."""
    try:
        return importlib.metadata.version("lorafleet")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
