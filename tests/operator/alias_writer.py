"""A process deploying one alias many times through the CLI's code (`lorafleet alias set`), for
the race tests: `python -m tests.operator.alias_writer MODEL ADAPTER,... (--folder DIR | --cluster
URL NAMESPACE)`. It prints `ready`, waits for a line on stdin (so the racers start together),
then deploys each adapter in turn and prints `{"adapter", "previous"}` per deploy as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kubernetes_asyncio.client import Configuration

from lorafleet_cli.cmd_alias import set_alias
from lorafleet_cli.targets import ClusterTarget, FolderTarget, Target


def main(argv: list[str]) -> int:
    model, adapters, where, *rest = argv
    target: Target
    if where == "--folder":
        target = FolderTarget(Path(rest[0]))
    else:
        target = ClusterTarget(rest[1], Configuration(host=rest[0]))
    print("ready", flush=True)
    sys.stdin.readline()
    for adapter in adapters.split(","):
        _, previous = set_alias(target, model, adapter)
        print(json.dumps({"adapter": adapter, "previous": previous}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
