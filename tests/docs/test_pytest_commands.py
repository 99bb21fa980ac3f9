"""Every `pytest FILE [-k EXPR]` the README and docs/ give as a test to run names a test file
that exists and, with `-k`, selects tests in it, and every `tests/...py::test` they cite exists:
a renamed or split test module otherwise leaves a doc whose command runs nothing."""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"pytest\s+([^`|]*)")
KEYWORDS = {"or", "and", "not"}


def pytest_commands(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, arguments) of every pytest command in a markdown file."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in COMMAND.finditer(line):
            try:
                yield number, shlex.split(match.group(1))
            except ValueError:  # an unbalanced quote: judge the words
                yield number, match.group(1).split()


def names_in(path: Path) -> set[str]:
    """The test functions and classes of a file (or of every test file under a folder)."""
    files = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
    names = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
    return names


def problems(args: list[str], root: Path) -> list[str]:
    paths = [a for a in args if a.split("::")[0].startswith(("tests/", "e2e/"))]
    found = []
    names: set[str] = set()
    for arg in paths:
        file, _, test = arg.partition("::")
        if not (root / file).exists():
            found.append(f"no such file {file}")
            continue
        here = names_in(root / file)
        names |= here
        if test and test.split("[")[0].split("::")[0] not in here:
            found.append(f"no test {arg}")
    if "-k" in args[:-1] and names:
        expression = args[args.index("-k") + 1]
        for word in re.findall(r"[\w\[\]-]+", expression):
            if word not in KEYWORDS and not any(word.lower() in n.lower() for n in names):
                found.append(f"-k {word!r} selects nothing in {' '.join(paths)}")
    return found


def test_every_documented_pytest_command_runs_tests():
    wrong = []
    checked = 0
    for path in DOCS:
        for number, args in pytest_commands(path):
            checked += 1
            wrong += [f"{path.relative_to(ROOT)}:{number}: {p}" for p in problems(args, ROOT)]
    assert checked > 30, checked  # the docs cite their tests: none found means a bug here
    assert not wrong, "\n".join(wrong)


def test_a_moved_test_or_a_renamed_file_in_a_doc_is_found(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text("def test_kept_alive():\n    pass\n")
    assert problems(["tests/test_a.py", "-k", "kept_alive"], tmp_path) == []
    assert problems(["tests/test_a.py", "-k", "kept or moved"], tmp_path) == [
        "-k 'moved' selects nothing in tests/test_a.py"
    ]
    assert problems(["tests/test_b.py"], tmp_path) == ["no such file tests/test_b.py"]
    assert problems(["tests/test_a.py::test_gone"], tmp_path) == [
        "no test tests/test_a.py::test_gone"
    ]


def test_every_test_file_and_test_the_docs_name_exists():
    """`tests/x/test_y.py` and `tests/x/test_y.py::test_z` named anywhere in the docs, not only
    in a pytest command."""
    reference = re.compile(r"\b((?:tests|e2e)/[\w/]+\.py)(?:::(\w+))?")
    wrong = []
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for file, test in reference.findall(line):
                if not (ROOT / file).exists():
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: no such file {file}")
                elif test and test not in names_in(ROOT / file):
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: no test {file}::{test}")
    assert not wrong, "\n".join(wrong)
