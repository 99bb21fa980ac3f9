"""Merged weights of a merged ReplicaPool: their checksum and where they live in the store.

A merged model is a flat folder written by the merge step (lorafleet_agent.merge_job):
config.json, the weights as *.safetensors, the tokenizer files. Its checksum is the project's
framed sha256 (lorafleet_core.storage.adapter_files.framed_sha256) over every file of the folder in
name order, so nothing can be added, removed or altered without the checksum changing; a
replica verifies it before vLLM reads the folder.

The store keeps merged weights under a content-addressed prefix, `<store prefix>/<hex>/`
(the checksum's hex), so one result is written once, a retried merge lands in the same place,
and a URI names exactly one set of bytes.
"""

from __future__ import annotations

from pathlib import Path

from lorafleet_core.storage.adapter_files import framed_sha256

# Under the adapter's own bucket (s3) or folder tree (file) unless the operator names a prefix.
DEFAULT_PREFIX = "lorafleet-merged"


def merged_files(folder: Path) -> list[str]:
    """The files that make up a merged model folder, in checksum order (by name)."""
    names = sorted(p.name for p in folder.iterdir())
    nested = [n for n in names if not (folder / n).is_file()]
    if nested:
        raise ValueError(f"{folder}: a merged model folder is flat; found {nested}")
    return names


def merged_checksum(folder: Path) -> str:
    """`sha256:<hex>` over every file of a merged model folder (framed, in name order)."""
    return framed_sha256(folder, merged_files(folder))


def merged_uri(store_prefix: str, checksum: str) -> str:
    """The content-addressed prefix of merged weights: `<store_prefix>/<hex>/`."""
    hex_digest = checksum.removeprefix("sha256:")
    return f"{store_prefix.rstrip('/')}/{hex_digest}/"


def default_store_prefix(adapter_weights_uri: str) -> str:
    """Where merged weights go when the operator names no prefix: beside the adapters.

    s3://bucket/any/path/ -> s3://bucket/lorafleet-merged; file:///data/adapters/a/ ->
    file:///data/adapters/lorafleet-merged (the adapter folder's parent).
    """
    if adapter_weights_uri.startswith("s3://"):
        bucket = adapter_weights_uri.removeprefix("s3://").split("/", 1)[0]
        return f"s3://{bucket}/{DEFAULT_PREFIX}"
    path = Path(adapter_weights_uri.removeprefix("file://").rstrip("/"))
    return f"file://{path.parent / DEFAULT_PREFIX}"


class MergedChecksumError(ValueError):
    """The merged folder's files do not hash to the checksum the pool's status names."""


def verify_merged(folder: Path, checksum: str) -> None:
    """Raise MergedChecksumError unless the folder hashes to `checksum`."""
    got = merged_checksum(folder)
    if got != checksum:
        raise MergedChecksumError(f"merged weights in {folder} hash to {got}, expected {checksum}")
