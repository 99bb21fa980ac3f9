"""The CLI's exit codes, one meaning each (what scripts and CI branch on).

0 the command did what was asked; 1 it could not (not found, refused, target unreachable);
2 the command line itself is wrong (argparse's own code for unknown options, reused for
arguments that parse but are not valid values, such as a malformed model name).
"""

from __future__ import annotations

import sys

OK = 0
FAILURE = 1
USAGE = 2


class CommandFailed(RuntimeError):
    """The command could not do what was asked; main prints it and exits 1."""


class UsageError(ValueError):
    """An argument is not a valid value; main prints it and exits 2."""


def fail(exc: BaseException | str, code: int = FAILURE) -> int:
    """Print `error: ...` to stderr and return the exit code."""
    print(f"error: {exc}", file=sys.stderr)
    return code
