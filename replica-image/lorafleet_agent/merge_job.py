"""The merge step of a merged ReplicaPool: adapter + base model -> merged weights in the store.

    python -m lorafleet_agent.merge_job --record JSON --base-model DIR|URI \
        --base-model-hash sha256:... --store-prefix s3://bucket/lorafleet-merged [--work-dir D]

Runs as a Kubernetes Job on a cluster (planned by lorafleet_core.planning.merge_job, in the
replica image: it holds torch, transformers and peft) and as a local step in standalone mode
(`lorafleet up`). Steps, each refusing loudly:

1. the record (the registry's LoRAAdapter, passed by the operator, never a user's path) must
   name the pool's base model hash;
2. the adapter is fetched through the agent's verified path (ObjectStore.fetch, then
   verifier.check_files: checksum, rank, modules, tensor shapes against the base model);
3. the base model folder must hash to the pool's baseModel.hash (adapter_files.base_model_hash);
4. PEFT `merge_and_unload` on the base model (its own dtype), saved as safetensors with the
   config and the base's tokenizer;
5. the folder's checksum (lorafleet_core.storage.merged_weights) names its content-addressed
   prefix in the store, where the files are uploaded (SHA256 stored with each object).

The result is one JSON object: in the container's termination message (/dev/termination-log, or
`--result-file`), which the operator reads from the Job's pod into status.merge, and in the log
(`merge report: {...}`). Every line the step writes is in lorafleet's log format
(lorafleet_core.logs), like the agent's.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lorafleet_agent.object_store import ObjectStore, ObjectStoreConfig
from lorafleet_agent.settings import AgentSettings
from lorafleet_agent.verifier import PoolPolicy, VerificationError, check_files, check_record
from lorafleet_core import logs
from lorafleet_core.api import reasons
from lorafleet_core.api.models import ALL_TARGET_MODULES
from lorafleet_core.planning.base_model import BaseModelKind, base_model_source
from lorafleet_core.storage.adapter_files import BaseModelDims, base_model_hash
from lorafleet_core.storage.merged_weights import merged_checksum, merged_uri
from lorafleet_core.wire.records import AdapterRecord

log = logging.getLogger(__name__)

TERMINATION_LOG = Path("/dev/termination-log")


@dataclass(frozen=True)
class MergeResult:
    """What the merge produced (the JSON the operator reads; keys as in status.merge)."""

    adapter_id: str
    adapter_checksum: str  # the record's: what was merged, which status.merge is Ready for
    checksum: str
    uri: str
    size_bytes: int

    def line(self) -> str:
        """camelCase keys, as status.merge spells them (lorafleet_core.planning.merge_job)."""
        wire = {
            "adapterId": self.adapter_id,
            "adapterChecksum": self.adapter_checksum,
            "checksum": self.checksum,
            "uri": self.uri,
            "sizeBytes": self.size_bytes,
        }
        return json.dumps(wire, separators=(",", ":"), sort_keys=True)


class MergeError(RuntimeError):
    """The merge was refused or failed; `reason` is a reasons.* word for status.merge."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def merge_folders(base_dir: Path, adapter_dir: Path, out: Path) -> None:
    """PEFT merge_and_unload of `adapter_dir` into the base model, saved to `out` (flat).

    The base is loaded in its own dtype ("auto"): the merged weights are what the replicas
    serve, in the dtype vLLM would have run the base in.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto")
    merged = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    merged.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out)


def _local_base(base_model: str, store: ObjectStore, work: Path) -> Path:
    """The base model folder: a local one (/p, file:///p) as it is, an s3:// prefix fetched
    into `work`; a hub id cannot be hashed against the pool's baseModel.hash here."""
    source = base_model_source(base_model)
    if source.local_dir is not None:
        return Path(source.local_dir)
    if source.kind is not BaseModelKind.OBJECT_STORE:
        raise MergeError(
            reasons.MERGE_FAILED,
            f"base model {base_model} is neither a folder nor an s3:// prefix: the merge must "
            "hash its files against baseModel.hash",
        )
    dest = work / "base"
    dest.mkdir()
    store.fetch_folder(base_model, dest)
    return dest


def run_merge(
    record: AdapterRecord,
    *,
    base_model: str,
    pool_base_hash: str,
    store_prefix: str,
    store: ObjectStore,
    work_dir: Path,
) -> MergeResult:
    """Fetch and verify the adapter, check the base model, merge, store; raises MergeError."""
    # A merge serves one adapter with LoRA disabled: no slot rank cap applies, only the base.
    policy = PoolPolicy(pool_base_hash, 256, frozenset(ALL_TARGET_MODULES))
    try:
        check_record(record, policy)
    except VerificationError as exc:
        raise MergeError(exc.reason, str(exc)) from exc
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        work = Path(tmp)
        base_dir = _local_base(base_model, store, work)
        got = base_model_hash(base_dir)
        if got != pool_base_hash:
            raise MergeError(
                reasons.BASE_MODEL_MISMATCH,
                f"base model at {base_model} hashes to {got}, the pool names {pool_base_hash}",
            )
        adapter_dir = work / "adapter"
        adapter_dir.mkdir()
        store.fetch(record.weights_uri, adapter_dir, record.tenant)
        with_dims = PoolPolicy(
            pool_base_hash,
            policy.max_rank,
            policy.allowed_target_modules,
            BaseModelDims.from_model_dir(base_dir),
        )
        try:
            check_files(adapter_dir, record, with_dims)
        except VerificationError as exc:
            raise MergeError(exc.reason, str(exc)) from exc
        out = work / "merged"
        merge_folders(base_dir, adapter_dir, out)
        checksum = merged_checksum(out)
        uri = merged_uri(store_prefix, checksum)
        size = store.upload_folder(out, uri)
    log.info("merged %s into %s: %s (%d bytes) at %s", record.id, base_model, checksum, size, uri)
    return MergeResult(record.id, record.checksum, checksum, uri, size)


def _report(text: str, result_file: Path | None) -> None:
    # A log line like every other (`kubectl logs`, a log pipeline); the termination log holds
    # the bare JSON the operator parses.
    log.info("merge report: %s", text)
    target = result_file if result_file is not None else TERMINATION_LOG
    if result_file is not None or TERMINATION_LOG.parent.is_dir():
        try:
            target.write_text(text)
        except OSError as exc:  # not in a pod: the log line is the report
            log.debug("no termination log: %s", exc)


def main(argv: list[str] | None = None) -> int:
    logs.configure()
    parser = argparse.ArgumentParser(prog="python -m lorafleet_agent.merge_job")
    parser.add_argument("--record", required=True, help="the adapter's registry record (JSON)")
    parser.add_argument("--base-model", required=True, help="folder, s3:// or file:// prefix")
    parser.add_argument("--base-model-hash", required=True)
    parser.add_argument("--store-prefix", required=True, help="where merged weights go")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--result-file", type=Path, default=None)
    args = parser.parse_args(argv)
    s = AgentSettings()  # the object store settings replicas use (LORAFLEET_AGENT_S3_*)
    store = ObjectStore(
        ObjectStoreConfig(
            s.s3_endpoint_url, s.s3_region, s.s3_access_key_id, s.s3_secret_access_key
        )
    )
    try:
        record = AdapterRecord.model_validate_json(args.record)
        result = run_merge(
            record,
            base_model=args.base_model,
            pool_base_hash=args.base_model_hash,
            store_prefix=args.store_prefix,
            store=store,
            work_dir=args.work_dir,
        )
    except MergeError as exc:
        _report(json.dumps({"reason": exc.reason, "message": str(exc)}), args.result_file)
        return 2
    except Exception as exc:  # the Job's pod reports why it failed, whatever it was
        log.exception("merge failed")
        _report(json.dumps({"reason": "MergeFailed", "message": str(exc)[:2000]}), args.result_file)
        return 1
    _report(result.line(), args.result_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["MergeError", "MergeResult", "merge_folders", "run_merge"]
