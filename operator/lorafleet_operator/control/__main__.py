"""`python -m lorafleet_operator.control`: the control API alone (LORAFLEET_OPERATOR_* settings)."""

from __future__ import annotations

import asyncio

from lorafleet_core import logs
from lorafleet_operator.control.serve import run_alone
from lorafleet_operator.settings import OperatorSettings


def main() -> None:
    logs.configure("INFO")
    asyncio.run(run_alone(OperatorSettings()))


if __name__ == "__main__":
    main()
