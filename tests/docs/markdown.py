"""Lines of a markdown file as the doc guards read them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def doc_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, inside a code block) for each line outside the fences; in code
    blocks a backslash continuation is joined into its command's first line."""
    lines = path.read_text().splitlines()
    in_code, i = False, 0
    while i < len(lines):
        number, line = i + 1, lines[i]
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif in_code:
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i]
            yield number, line, True
        else:
            yield number, line, False
        i += 1
