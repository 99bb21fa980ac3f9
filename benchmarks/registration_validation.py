"""Time to validate an adapter registration with a huge `targetModules`, before and after a
change, side by side in one run.

What the control API runs for `POST /internal/adapters` (lorafleet_core.planning
.adapter_registration.problems: schema, list-type and CEL checks, then the pools) on a
registration with N distinct target modules, for each N in `--sizes`, in a fresh process per
tree and size (`--before` as a git archive, and this checkout), each cut off after
`--limit-s` seconds. The CRD allows 32; the control API's body limit (1 MiB) admits about
90,000 short names, so the check must stay linear up to there.

    .venv/bin/python -m benchmarks.registration_validation [--before main]
        [--sizes 20000,100000] [--limit-s 150]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.before_after import archive_tree
from benchmarks.results import Result
from benchmarks.source_roots import pythonpath

ROOT = Path(__file__).resolve().parents[1]

# Run in the tree under test: the body as the control API builds it, timed around `problems`.
PROBE = """
import sys, time
from lorafleet_core.planning.adapter_registration import AdapterRegistration, problems
n = int(sys.argv[1])
body = AdapterRegistration(
    adapter_id="big-v1", tenant="acme", version="v1", base_model_hash="sha256:" + "a" * 64,
    rank=8, alpha=16.0, target_modules=[f"m{i}" for i in range(n)],
    weights_uri="s3://adapters/acme/big-v1/", checksum="sha256:" + "b" * 64,
).manifest()
t0 = time.perf_counter()
reasons = problems(body, [])
print(time.perf_counter() - t0, sum(len(r) for r in reasons))
"""


def measure(tree: Path, n: int, limit_s: float) -> tuple[str, str]:
    """(seconds, characters of the reasons) for one tree and size, or a cut-off mark."""
    env = {**os.environ, "PYTHONPATH": pythonpath(tree)}
    try:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(n)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=limit_s,
            check=True,
        ).stdout.split()
    except subprocess.TimeoutExpired:
        return f"> {limit_s:g}", "-"
    return f"{float(out[0]):.2f}", out[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git ref of the 'before' tree")
    parser.add_argument("--sizes", default="20000,100000", help="comma-separated N")
    parser.add_argument("--limit-s", type=float, default=150.0, help="cut-off per run")
    parser.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    result = Result(
        "registration_validation", ["tree", "targetModules", "seconds", "reason characters"]
    )
    with tempfile.TemporaryDirectory(prefix="reg-validation-") as name:
        before = archive_tree(args.before, Path(name))
        for label, tree in ((f"before ({args.before})", before), ("after", ROOT)):
            for n in sizes:
                seconds, chars = measure(tree, n, args.limit_s)
                result.add(
                    tree=label, targetModules=n, seconds=seconds, **{"reason characters": chars}
                )
    result.notes.append("problems() on one registration (no pools), one process per row")
    result.emit(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
