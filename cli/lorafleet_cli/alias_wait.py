"""`--wait` for `alias set` / `alias rollback`: return once the alias serves the new adapter.

Serving is `status.adapter`, written by the operator (or the standalone reconciler) only when
the target is servable, so this polls the alias status until it names the adapter, fails at
once when the Deployed condition refuses this very adapter for a reason that waiting cannot fix,
and gives up after the timeout. A still-Pending target (being validated or placed) is waited for.
A deploy past the alias's spec.progressDeadlineSeconds (ProgressDeadlineExceeded) also ends the
wait with exit 1, as `kubectl rollout status` does for a Deployment: the reconciler has given up
reporting it as progressing, although it still completes if a replica verifies the version.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lorafleet_cli.exit_codes import CommandFailed
from lorafleet_cli.targets import Target
from lorafleet_core.api import reasons
from lorafleet_core.api.models import AdapterAliasStatus

DEFAULT_TIMEOUT_S = 120.0
POLL_S = 0.5

# Deployed=False reasons that stay so however long one waits (see planning.aliases).
FINAL_REASONS = frozenset({"TenantMismatch", "AdapterDeleting", "ModelClaimed"})


def refusal(status: AdapterAliasStatus | None, adapter: str) -> str | None:
    """Why the deploy of `adapter` will not happen, or None while it still may."""
    if status is None:
        return None
    for c in status.conditions:
        if c.type != "Deployed" or c.status != "False":
            continue
        about_it = f"LoRAAdapter {adapter} " in c.message or c.reason == "ModelClaimed"
        gone_bad = any(f" is {phase}" in c.message for phase in ("Rejected", "Failed"))
        hopeless = c.reason in FINAL_REASONS or (c.reason == "AdapterNotReady" and gone_bad)
        if about_it and hopeless:
            return f"{c.reason}: {c.message}"
    return None


def _stalled(status: AdapterAliasStatus | None, adapter: str) -> str | None:
    """The Deployed condition's reason and message when the deploy of `adapter` is past its
    progress deadline, else None."""
    for c in status.conditions if status is not None else []:
        if (
            c.type == reasons.DEPLOYED
            and c.reason == reasons.PROGRESS_DEADLINE_EXCEEDED
            and c.message.startswith(f"LoRAAdapter {adapter} ")
        ):
            return f"{c.reason}: {c.message}"
    return None


def wait_until_served(
    target: Target,
    name: str,
    adapter: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> AdapterAliasStatus:
    """The alias status once it serves `adapter`; CommandFailed when refused or timed out."""
    deadline = clock() + timeout_s
    while True:
        status = target.alias_status(name)
        if status is not None and status.adapter == adapter:
            return status
        why = refusal(status, adapter)
        if why is not None:
            raise CommandFailed(f"deploy of {adapter} refused ({why})")
        stalled = _stalled(status, adapter)
        if stalled is not None:
            raise CommandFailed(f"deploy of {adapter} exceeded its progress deadline ({stalled})")
        if clock() >= deadline:
            serving = (status.adapter if status else None) or "nothing"
            raise CommandFailed(
                f"AdapterAlias {name} does not serve {adapter} after {timeout_s:g} s "
                f"(still serving {serving}); see `lorafleet alias get {name} -o wide`"
            )
        sleep(poll_s)
