"""A merged pool's weights on a replica: fetched from the store and verified before vLLM runs.

    python -m lorafleet_agent.merged_model --uri s3://.../<hex>/ --checksum sha256:<hex> --dest D

On a cluster this is the replica pod's init container (the vLLM container starts only after it
succeeded, so vLLM never reads unverified files); in standalone mode `lorafleet up` calls
`ensure_merged` before it starts the merged pool's vLLM. A folder already at `dest` that
verifies is kept (a restarted pod does not download again); one that does not is replaced.
The agent verifies the folder once more when it starts (`verify_merged`), so what it reports in
/state as served is what vLLM loaded.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lorafleet_agent.object_store import FetchError, ObjectStore, ObjectStoreConfig
from lorafleet_agent.settings import AgentSettings
from lorafleet_core import logs
from lorafleet_core.storage.merged_weights import MergedChecksumError, verify_merged

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergedModel:
    """What a merged pool's vLLM serves: one adapter merged into the base, by its id."""

    adapter_id: str
    checksum: str
    folder: Path

    def verify(self) -> None:
        """Raise RuntimeError unless the folder holds the weights the pool's status names."""
        try:
            verify_merged(self.folder, self.checksum)
        except (MergedChecksumError, OSError, ValueError) as exc:
            raise RuntimeError(
                f"refusing to serve merged adapter {self.adapter_id}: {exc}"
            ) from exc
        log.info("merged weights of %s verified (%s)", self.adapter_id, self.checksum)


def ensure_merged(store: ObjectStore, uri: str, checksum: str, dest: Path) -> Path:
    """`dest` holding the merged weights that hash to `checksum`; raises MergedChecksumError
    (the store's copy is not what status.merge names) or FetchError."""
    if dest.is_dir():
        try:
            verify_merged(dest, checksum)
            return dest
        except (MergedChecksumError, ValueError) as exc:
            log.warning("replacing the merged weights at %s: %s", dest, exc)
            shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=dest.parent))
    try:
        store.fetch_folder(uri, staging)
        verify_merged(staging, checksum)
        staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return dest


def main(argv: list[str] | None = None) -> int:
    logs.configure()
    parser = argparse.ArgumentParser(prog="python -m lorafleet_agent.merged_model")
    parser.add_argument("--uri", required=True)
    parser.add_argument("--checksum", required=True)
    parser.add_argument("--dest", type=Path, required=True)
    args = parser.parse_args(argv)
    s = AgentSettings()
    store = ObjectStore(
        ObjectStoreConfig(
            s.s3_endpoint_url, s.s3_region, s.s3_access_key_id, s.s3_secret_access_key
        )
    )
    try:
        ensure_merged(store, args.uri, args.checksum, args.dest)
    except (FetchError, MergedChecksumError) as exc:
        log.error("merged weights refused: %s", exc)
        return 2
    log.info("merged weights verified at %s (%s)", args.dest, args.checksum)
    return 0


if __name__ == "__main__":
    sys.exit(main())
