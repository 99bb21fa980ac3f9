"""`lorafleet canary`: probe every alias through a gateway; did each answer with its own adapter?

    lorafleet canary --gateway http://127.0.0.1:8080 --key-file .lorafleet/demo-api-key
    lorafleet canary --gateway https://gw.example --key-file key --markers acme/bot:prod=ACME-1 \\
        --rounds 30 --interval 2 --textfile /var/lib/node_exporter/lorafleet_canary.prom

An alias with a weighted split in force (its status's `split`, read from --manifests) passes a
probe only when the version that served it (`x-adapter-id`) is one in force and the answer
carries that version's own marker; the report counts probes by version served. Without
--manifests (a cluster's canary), `--markers ALIAS@VERSION=MARKER`, once per version, says the
same: an answer passes only from a listed version and with that version's marker. A plain
`ALIAS=MARKER` is one marker for whichever version answers: for aliases without a split.

Exit 0: every probe that has an expected marker answered it and errors stayed within
--max-error-rate; 1: a wrong or missing marker, too many errors, or nothing probed; 2: bad
arguments. The key is read from --key-file (or $LORAFLEET_API_KEY), never from the command line,
and never appears in the output or the textfile.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from pathlib import Path
from typing import Any

from lorafleet_cli.exit_codes import USAGE, fail
from lorafleet_loadtest.probe.canary import (
    Expected,
    format_report,
    probe,
    prometheus_textfile,
    verdict,
)
from lorafleet_loadtest.probe.client import DEFAULT_KEY_FILE, base_url, manifests_for, read_key
from lorafleet_loadtest.probe.markers import parse_canary_markers, version_markers_from_manifests


def register(sub: Any) -> None:
    p = sub.add_parser(
        "canary",
        help="probe every alias through a gateway and check its canary marker (exit 1 on a leak)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--gateway",
        default="http://127.0.0.1:8080",
        help="gateway URL (/v1 optional; default: lorafleet up's, %(default)s)",
    )
    p.add_argument("--key-file", type=Path, default=None, help=f"default {DEFAULT_KEY_FILE}")
    p.add_argument(
        "--manifests",
        type=Path,
        default=None,
        help="aliases and markers from here (default: .lorafleet/manifests "
        "for lorafleet up's gateway)",
    )
    p.add_argument("--aliases", nargs="+", default=None, help="default: every alias with a marker")
    p.add_argument(
        "--markers",
        nargs="*",
        default=[],
        metavar="ALIAS[@VERSION]=MARKER",
        help="ALIAS=MARKER: one marker, any version; ALIAS@VERSION=MARKER (once per version): "
        "only the listed versions may answer, each with its own marker",
    )
    p.add_argument("--rounds", type=int, default=1, help="rounds of one probe per alias (1)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between rounds (5)")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--timeout", type=float, default=60.0, help="per request, seconds")
    p.add_argument("--max-error-rate", type=float, default=0.0, help="above this: exit 1")
    p.add_argument("--textfile", type=Path, default=None, help="write Prometheus metrics here")
    p.set_defaults(func=run)


def write_atomically(path: Path, text: str) -> None:
    # node_exporter may read at any moment: never let it see half a file.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def run(args: argparse.Namespace) -> int:
    if args.rounds < 1 or not 0 <= args.interval < math.inf:  # NaN fails both comparisons
        return fail("--rounds must be >= 1 and --interval a finite number >= 0", USAGE)
    if not 0 < args.timeout < math.inf or args.max_tokens < 1:
        return fail("--timeout must be a finite number > 0 and --max-tokens >= 1", USAGE)
    if not 0 <= args.max_error_rate <= 1:
        return fail("--max-error-rate is a share between 0 and 1", USAGE)
    try:
        manifests = manifests_for(args.gateway, args.manifests)
        found = version_markers_from_manifests(manifests) if manifests else {}
        given = parse_canary_markers(args.markers)
        key = read_key(args.key_file)
    except ValueError as exc:
        return fail(exc, USAGE)
    known: dict[str, Expected] = {**found, **given}  # --markers wins over --manifests
    aliases = args.aliases or sorted(known)
    if not aliases:
        return fail("no aliases: pass --aliases, --markers or --manifests", USAGE)
    markers: dict[str, Expected] = {a: known.get(a) for a in aliases}
    tallies = asyncio.run(
        probe(
            base_url=base_url(args.gateway),
            api_key=key,
            markers=markers,
            interval_s=args.interval,
            rounds=args.rounds,
            duration_s=float("inf"),
            max_tokens=args.max_tokens,
            timeout_s=args.timeout,
        )
    )
    code = verdict(tallies, args.max_error_rate)
    print()
    print(format_report(tallies))
    probes = sum(t.probes for t in tallies.values())
    misses = sum(t.misses for t in tallies.values())
    errors = sum(t.errors for t in tallies.values())
    print(
        f"{'OK' if code == 0 else 'FAIL'}: {probes} probes over {len(tallies)} aliases, "
        f"{misses} wrong or missing markers, {errors} errors"
    )
    if args.textfile is not None:
        write_atomically(args.textfile, prometheus_textfile(tallies, code, time.time()))
    return code
