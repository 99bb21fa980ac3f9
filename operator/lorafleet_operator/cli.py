"""Operator entry points: `python -m lorafleet_operator` and `lorafleet operator`."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from lorafleet_core import logs
from lorafleet_operator.settings import OperatorSettings


def run_operator(namespaces: list[str] | None = None, verbose: bool = False) -> int:
    import kopf

    import lorafleet_operator.handlers  # noqa: F401  (registers the handlers)

    kopf.configure(verbose=verbose)  # its logger levels; its handler gives way to ours
    logs.configure(logging.DEBUG if verbose else logging.INFO)
    settings = OperatorSettings()
    ns = namespaces if namespaces else settings.namespace_list()
    kopf.run(
        standalone=settings.standalone,
        namespaces=ns,
        clusterwide=not ns,
        liveness_endpoint=settings.liveness_endpoint,
    )
    return 0


def register(subparsers: Any) -> None:
    """Add `lorafleet operator` to the CLI (lorafleet_cli.main loads this module only when the
    operator is installed, so the CLI runs without kopf)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "operator",
        help="run the Kubernetes operator (kopf)",
        description="Runs the kopf operator against the cluster of your kubeconfig (in a pod: "
        "its ServiceAccount). It serves the namespaces given with -n, else those in "
        "LORAFLEET_OPERATOR_NAMESPACES, else the whole cluster. The Helm chart runs it for "
        "you; run it by hand only to develop or debug it.",
    )
    parser.add_argument(
        "-n", "--namespace", action="append", default=[], help="namespace to serve (repeatable)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.set_defaults(func=lambda args: run_operator(args.namespace, args.verbose))
