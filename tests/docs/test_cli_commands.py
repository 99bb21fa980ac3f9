"""Every `lorafleet` command line in the README and docs/ names a subcommand and options the
CLI has: a renamed flag otherwise leaves a doc that fails on the first copy-paste."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

from lorafleet_cli.main import build_parser
from tests.docs.markdown import doc_lines

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"(?:^|(?<=[\s(/]))lorafleet\s+(.*)$")
# What may stand before a command: nothing, a shell separator, a prompt, or wrappers
# (environment assignments, the machine's vLLM slot wrapper, a path to the script).
WRAPPERS = re.compile(r"(?:\S+=\S*\s+|\S*with-vllm-slot\s+(?:--bench\s+)?|timeout\s+\d+\s+)*\S*$")
SHELL_END = re.compile(r"(?:^|&&|\|\||[|;$(])\s*$")
ENDS_COMMAND = {"|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "<", "#"}


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def command_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line, what follows `lorafleet`) for every lorafleet command in a markdown file: in code
    blocks (backslash continuations joined) and in inline code."""
    for number, line, in_code in doc_lines(path):
        if in_code:
            yield from ((number, c) for c in _commands_in(line))
        else:
            for code in re.findall(r"`([^`]+)`", line):
                yield from ((number, c) for c in _commands_in(code))


def _commands_in(text: str) -> Iterator[str]:
    for match in COMMAND.finditer(text):
        before = text[: match.start()]
        if SHELL_END.search(WRAPPERS.sub("", before)):
            yield match.group(1)


def problems(rest: str, root: argparse.ArgumentParser) -> list[str]:
    """What is wrong with `lorafleet <rest>`: an unknown subcommand or option."""
    try:
        tokens = shlex.split(rest, comments=True)
    except ValueError:  # an unbalanced quote in prose: judge the words
        tokens = rest.split()
    parser, path, i = root, ["lorafleet"], 0
    found: list[str] = []
    while i < len(tokens):
        token = tokens[i].strip("[]")  # a synopsis: `lorafleet sim [--scenario S]`
        if token in ENDS_COMMAND:
            return found
        subs = subcommands(parser)
        if token in subs:
            parser, path = subs[token], [*path, token]
        elif token.startswith("-") and not re.fullmatch(r"-\d[\d.]*", token):
            flag = token.split("=", 1)[0]
            if flag not in options(parser):
                found.append(f"{' '.join(path)}: no option {flag}")
        elif subs and len(path) == 1 + sum(1 for t in tokens[:i] if not t.startswith("-")):
            # A word where a subcommand must stand (no positional came before it).
            found.append(f"{' '.join(path)}: no command {token!r}")
            return found
        i += 1
    return found


def test_every_documented_lorafleet_command_and_option_exists():
    root = build_parser()
    checked = 0
    wrong = []
    for path in DOCS:
        for number, rest in command_lines(path):
            checked += 1
            wrong += [f"{path.relative_to(ROOT)}:{number}: {p}" for p in problems(rest, root)]
    assert checked > 50, checked  # the docs are full of commands: none found means a bug here
    assert not wrong, "\n".join(wrong)


def test_a_renamed_option_or_command_in_a_doc_is_found(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Run `lorafleet alias list --tenat acme`, then `lorafleet alais get x`.\n"
        "```\n"
        "LORAFLEET_API_KEY=k lorafleet canary --gateway URL \\\n"
        "    --round 3 | tee out\n"
        "helm install lorafleet charts/lorafleet --set x=1\n"
        "```\n"
    )
    root = build_parser()
    found = [p for _, rest in command_lines(doc) for p in problems(rest, root)]
    assert found == [
        "lorafleet alias list: no option --tenat",
        "lorafleet: no command 'alais'",
        "lorafleet canary: no option --round",
    ]
