"""`python -m lorafleet_operator`: run the operator with settings from the environment."""

from __future__ import annotations

import sys

from lorafleet_operator.cli import run_operator

if __name__ == "__main__":
    sys.exit(run_operator())
