"""What must hold before `lorafleet up` starts anything: one `up` per state folder and per
manifests folder, and the ports it must listen on free. Each refusal is an UpError with one
line saying why (exit 1), found in milliseconds rather than after every vLLM has started."""

from __future__ import annotations

import fcntl
import socket
from pathlib import Path
from typing import IO

from lorafleet_core.storage.standalone_state import STATUS_DIR
from lorafleet_standalone.processes import LOOPBACK


class UpError(RuntimeError):
    pass


def _lock(folder: Path, taken: str) -> IO[str]:
    folder.mkdir(parents=True, exist_ok=True)
    fh = (folder / "up.lock").open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        fh.close()
        raise UpError(taken) from exc
    return fh


def lock_state_dir(state_dir: Path) -> IO[str]:
    """One `lorafleet up` per state folder: two would fight over ports, files and children."""
    return _lock(state_dir, f"another `lorafleet up` is running with state folder {state_dir}")


def lock_manifests_dir(manifests_dir: Path) -> IO[str]:
    """One `lorafleet up` per manifests folder: its `.lorafleet/` status files (alias status,
    merge status) have one writer. The demo's folder lies in the state folder: no-op there."""
    return _lock(
        manifests_dir / STATUS_DIR,
        f"another `lorafleet up` (another state folder) serves the manifests in {manifests_dir}",
    )


def check_ports_free(ports: dict[str, int | None]) -> None:
    """Refuse at once when a port `up` must listen on is taken: found only when the gateway
    starts, after every vLLM (a minute on a CPU), and a listener there that answers /healthz
    could even pass for our gateway. SO_REUSEADDR as uvicorn binds, so a port in TIME_WAIT
    from the last run counts as free; 0 and None mean any free port."""
    for what, port in ports.items():
        if not port:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((LOOPBACK, port))
            except OSError as exc:
                raise UpError(
                    f"{what} port {port} on {LOOPBACK} is in use ({exc.strerror}); "
                    "stop what listens there or pick another port"
                ) from exc
