"""Every relative link in the repository's markdown reaches a file that exists and, with a
`#fragment`, a heading (or an explicit anchor) of that file; every `docs/....md` path named in
code, comments, the chart or a test exists. Pages move and sections get renamed while the
manual is reorganised: a link that silently lands on the top of a page, or on nothing, is what
this catches."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.docs.markdown import doc_lines

ROOT = Path(__file__).resolve().parents[2]
# [text](target) and ![alt](target); the target ends at whitespace (a title may follow) or ")".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
# A docs page named in text: `docs/guides/deploy.md`, `../docs/runbook.md#canary-failed`.
# `rev:docs/x.md` (a file of a past commit, `git show 2c4fc08:docs/performance.md`) is not one.
DOC_PATH = re.compile(r"(?<![\w/.:-])((?:\.\./)*docs/[\w./-]*?\.md)(?:#([\w-]+))?")
# A design record named by its number in a code comment: `docs/design/0006`.
RECORD = re.compile(r"\bdocs/design/(\d{4})\b(?!-)")


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / p for p in out if (ROOT / p).is_file()]


def markdown_files() -> list[Path]:
    return tracked("*.md")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup and punctuation dropped, lower case,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The fragments a link may name in a markdown file: each heading's slug (a repeated one
    gets -1, -2, ... as GitHub numbers them) and explicit `<a id="...">` anchors."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line, in_code in doc_lines(path):
        if in_code:
            continue
        found.update(EXPLICIT_ANCHOR.findall(line))
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def links(path: Path) -> Iterator[tuple[int, str]]:
    """(line, target) of every link in a markdown file, outside code blocks and inline code."""
    for number, line, in_code in doc_lines(path):
        if in_code:
            continue
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            yield number, match.group(1)


def problem(source: Path, target: str, root: Path = ROOT) -> str | None:
    """What is wrong with a link from `source` to `target`, or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not this test's
        return None
    file_part, _, fragment = target.partition("#")
    dest = (source.parent / file_part).resolve() if file_part else source
    if not dest.is_relative_to(root.resolve()):
        return f"{target}: outside the repository"
    if not dest.exists():
        return f"{target}: no such file"
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        return f"{target}: {dest.relative_to(root.resolve())} has no section #{fragment}"
    return None


def test_every_relative_link_and_anchor_in_the_markdown_resolves():
    files = markdown_files()
    wrong = []
    checked = 0
    for path in files:
        for number, target in links(path):
            checked += 1
            found = problem(path, target)
            if found:
                wrong.append(f"{path.relative_to(ROOT)}:{number}: {found}")
    assert checked > 100, checked  # the manual links to itself: none found means a bug here
    assert not wrong, "\n".join(wrong)


def test_every_docs_page_named_in_code_or_text_exists():
    """`docs/runbook.md` in a chart comment, `docs/reference/gateway.md#routing` in a
    docstring, `docs/design/0006` in a comment, an error message pointing at a guide: each names
    a page (and a section, a design record) that exists."""
    wrong = []
    for path in tracked("*.py", "*.md", "*.yaml", "*.tpl", "*.txt", "*.json", "*.sh", "Makefile"):
        if path.is_relative_to(ROOT / "tests" / "docs"):
            continue  # this folder's own examples of broken paths
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for page, fragment in sorted(set(DOC_PATH.findall(line))):
                page = re.sub(r"^(\.\./)+", "", page)
                if not (ROOT / page).is_file():
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: no page {page}")
                elif fragment and fragment not in anchors(ROOT / page):
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: {page} has no #{fragment}")
            for record in RECORD.findall(line):
                if not list((ROOT / "docs" / "design").glob(f"{record}-*.md")):
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: no design record {record}")
    assert not wrong, "\n".join(wrong)


def test_a_moved_page_or_a_renamed_section_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Title\n\n## Routing policy and knobs\n\n## `lorafleet sim`\n\n## Routing policy and "
        'knobs\n\n<a id="old-name"></a>\n```\n## not a heading\n```\n'
    )
    assert anchors(page) == {
        "title",
        "routing-policy-and-knobs",
        "lorafleet-sim",
        "routing-policy-and-knobs-1",
        "old-name",
    }
    doc = tmp_path / "README.md"
    doc.write_text(
        "[ok](docs/page.md#lorafleet-sim) [gone](docs/old.md) [renamed](docs/page.md#routing)"
        " [web](https://example.com/x.md#y) `[code](docs/nope.md)` ![img](docs/page.md)\n"
    )
    found = [problem(doc, target, tmp_path) for _, target in links(doc)]
    assert [f for f in found if f] == [
        "docs/old.md: no such file",
        "docs/page.md#routing: docs/page.md has no section #routing",
    ]
