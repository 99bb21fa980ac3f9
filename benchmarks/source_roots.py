"""PYTHONPATH for running a checkout's processes from its sources (a benchmark's old and new tree).

The source roots are the ones the tree's own pyproject.toml packages, so an older checkout gets
its own layout rather than today's.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path


def source_roots(tree: Path) -> list[Path]:
    config = tomllib.loads((tree / "pyproject.toml").read_text())
    where = config["tool"]["setuptools"]["packages"]["find"]["where"]
    return [tree / p for p in where if (tree / p).is_dir()]


def pythonpath(tree: Path) -> str:
    return os.pathsep.join(str(p) for p in source_roots(tree))
