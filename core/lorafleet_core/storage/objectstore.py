"""Uploading an adapter's files to the object store, with a progress bar.

Two schemes, the ones a LoRAAdapter's weightsUri accepts: `s3://bucket/prefix` (boto3; the
endpoint comes from `--s3-endpoint-url` or boto3's own AWS_ENDPOINT_URL, so MinIO and moto
work) and `file:///path` (a local folder; standalone mode's default store is
`file://<state-dir>/objectstore`). Only the two files a replica loads are uploaded (see
lorafleet_core.storage.adapter_files); READMEs and training leftovers stay behind.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lorafleet_core.storage.adapter_files import ADAPTER_FILES, adapter_checksum


class StoreError(RuntimeError):
    pass


@dataclass(frozen=True)
class StoreUri:
    scheme: str  # "s3" or "file"
    bucket: str  # s3 only
    path: str  # s3: key prefix without leading/trailing slash; file: absolute folder

    def child(self, *parts: str) -> StoreUri:
        joined = "/".join(p.strip("/") for p in (self.path, *parts) if p.strip("/"))
        if self.scheme == "file":
            joined = "/" + joined
        return StoreUri(self.scheme, self.bucket, joined)

    def __str__(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.path}/" if self.path else f"s3://{self.bucket}/"
        return f"file://{self.path.rstrip('/')}/"


def parse_store_uri(uri: str) -> StoreUri:
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise StoreError(f"{uri}: s3:// needs a bucket")
        return StoreUri("s3", parsed.netloc, parsed.path.strip("/"))
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise StoreError(f"{uri}: file:// must name a local absolute path (file:///...)")
        return StoreUri("file", "", str(Path(parsed.path).resolve()))
    if parsed.scheme == "" and uri:
        # A plain path is convenient on the command line; store it as file://.
        return StoreUri("file", "", str(Path(uri).resolve()))
    raise StoreError(f"{uri}: object store must be s3:// or file://")


def default_store(state_dir: Path) -> str:
    return f"file://{(state_dir / 'objectstore').resolve()}"


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not enabled)


def stored_checksum(dest: StoreUri, *, endpoint_url: str | None = None) -> str | None:
    """The adapter checksum of what `dest` already holds; None when it holds no complete
    adapter (nothing, or what a failed upload left: no LoRAAdapter can name that)."""
    if dest.scheme == "file":
        folder = Path(dest.path)
        if not all((folder / n).is_file() for n in ADAPTER_FILES):
            return None
        return adapter_checksum(folder)
    import boto3
    from botocore.exceptions import ClientError

    s3 = boto3.client("s3", endpoint_url=endpoint_url)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ADAPTER_FILES:
            key = f"{dest.path}/{name}" if dest.path else name
            try:
                s3.download_file(dest.bucket, key, str(Path(tmp) / name))
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                    return None
                raise StoreError(f"cannot read {dest}: {exc}") from exc
            except Exception as exc:  # boto3 raises many types; all mean "not readable"
                raise StoreError(f"cannot read {dest}: {exc}") from exc
        return adapter_checksum(Path(tmp))


def upload_adapter(
    folder: Path,
    dest: StoreUri,
    *,
    endpoint_url: str | None = None,
    progress: bool = True,
) -> str:
    """Copy the adapter's files under `dest`; returns the weightsUri (ends with '/')."""
    files = [folder / n for n in ADAPTER_FILES]
    total = sum(f.stat().st_size for f in files)
    with _progress(total, f"upload {dest}", progress) as bar:
        if dest.scheme == "file":
            out = Path(dest.path)
            out.mkdir(parents=True, exist_ok=True)
            for f in files:
                with f.open("rb") as src, (out / f.name).open("wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                        bar.update(len(chunk))
        else:
            import boto3

            s3 = boto3.client("s3", endpoint_url=endpoint_url)
            for f in files:
                try:
                    s3.upload_file(
                        str(f),
                        dest.bucket,
                        f"{dest.path}/{f.name}" if dest.path else f.name,
                        ExtraArgs={"ChecksumAlgorithm": "SHA256"},
                        Callback=bar.update,
                    )
                except Exception as exc:  # boto3 raises many types; all mean "not uploaded"
                    raise StoreError(f"upload to {dest} failed: {exc}") from exc
    return str(dest)
