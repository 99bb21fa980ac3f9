"""Fetching an adapter's two files from the object store into a folder (boto3 or file://);
moving a merged model folder in and out of it (merged pools, lorafleet_core.storage.merged_weights).

Only the files vLLM reads (lorafleet_core.storage.adapter_files.ADAPTER_FILES) are fetched; anything
else under the prefix is ignored. Callers download into a temporary folder and rename it into
the cache only after verification (see lorafleet_agent.disk_cache), so a partial or corrupt
download is never visible under an adapter's name.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lorafleet_core.storage.adapter_files import ADAPTER_FILES


class FetchError(RuntimeError):
    """The object store did not deliver the adapter's files; the message says why."""


class StoreUnavailable(FetchError):
    """The object store is unreachable or failing (network, timeout, 5xx): a transient fault,
    answered 503 so callers retry later, unlike a missing object (a registry error)."""


# Fail fast while the store is down: a cold request waits seconds at most, never boto3's
# default 60 s connect timeout times its retries. Reads of large adapters stream in chunks, so
# the read timeout bounds a stall, not a download.
CONNECT_TIMEOUT_S, READ_TIMEOUT_S, MAX_ATTEMPTS = 2, 20, 2


@dataclass(frozen=True)
class ObjectStoreConfig:
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None


class ObjectStore:
    """Blocking fetches (run them in a worker thread); one boto3 client, created lazily."""

    def __init__(self, config: ObjectStoreConfig) -> None:
        self._config = config
        self._s3: Any = None

    def _client(self) -> Any:
        if self._s3 is None:
            import boto3
            from botocore.config import Config

            self._s3 = boto3.client(
                "s3",
                config=Config(
                    connect_timeout=CONNECT_TIMEOUT_S,
                    read_timeout=READ_TIMEOUT_S,
                    retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
                ),
                endpoint_url=self._config.endpoint_url,
                region_name=self._config.region,
                aws_access_key_id=self._config.access_key_id,
                aws_secret_access_key=self._config.secret_access_key,
            )
        return self._s3

    def fetch(self, uri: str, dest: Path, tenant: str | None = None) -> int:
        """Copy the adapter files under `uri` into the existing folder `dest`; returns bytes.

        For file:// with `tenant` (the record's), nothing at or below the `tenant` folder may
        be a symbolic link (see _tenant_links)."""
        parsed = urlparse(uri)
        if parsed.scheme == "s3":
            return self._fetch_s3(parsed.netloc, parsed.path.lstrip("/"), dest)
        if parsed.scheme == "file":
            folder = Path(unquote(parsed.path))
            if tenant is not None:
                _refuse_tenant_links(folder, tenant)
            return _fetch_file(folder, dest)
        raise FetchError(f"unsupported weights URI scheme {parsed.scheme!r}")

    def fetch_folder(self, uri: str, dest: Path) -> int:
        """Copy every object directly under the prefix `uri` into `dest` (a merged model).

        The caller verifies the result against the merged checksum: the listing itself is not
        trusted, an extra or missing object changes the checksum.
        """
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            folder = Path(unquote(parsed.path))
            if not folder.is_dir():
                raise FetchError(f"{folder}: no such folder")
            names = [p.name for p in folder.iterdir() if p.is_file()]
            for name in names:
                shutil.copyfile(folder / name, dest / name)
            return sum((dest / n).stat().st_size for n in names)
        if parsed.scheme != "s3":
            raise FetchError(f"unsupported weights URI scheme {parsed.scheme!r}")
        bucket, prefix = parsed.netloc, parsed.path.lstrip("/").rstrip("/") + "/"
        with _store_errors(f"s3://{bucket}/{prefix}"):
            pages = (
                self._client()
                .get_paginator("list_objects_v2")
                .paginate(Bucket=bucket, Prefix=prefix, Delimiter="/")
            )
            keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        if not keys:
            raise FetchError(f"s3://{bucket}/{prefix}: no objects")
        total = 0
        for key in keys:
            total += self._get(bucket, key, dest / key[len(prefix) :])
        return total

    def upload_folder(self, folder: Path, uri: str) -> int:
        """Store every file of a flat folder under the prefix `uri`; returns bytes written."""
        parsed = urlparse(uri)
        files = sorted(p for p in folder.iterdir() if p.is_file())
        if parsed.scheme == "file":
            target = Path(unquote(parsed.path))
            target.mkdir(parents=True, exist_ok=True)
            for f in files:
                shutil.copyfile(f, target / f.name)
            return sum(f.stat().st_size for f in files)
        if parsed.scheme != "s3":
            raise FetchError(f"unsupported weights URI scheme {parsed.scheme!r}")
        bucket, prefix = parsed.netloc, parsed.path.lstrip("/").rstrip("/") + "/"
        for f in files:
            with _store_errors(f"s3://{bucket}/{prefix}{f.name}"), f.open("rb") as body:
                # The stored SHA256 lets every later GET (ChecksumMode) verify the bytes.
                self._client().put_object(
                    Bucket=bucket, Key=prefix + f.name, Body=body, ChecksumAlgorithm="SHA256"
                )
        return sum(f.stat().st_size for f in files)

    def _get(self, bucket: str, key: str, target: Path) -> int:
        total = 0
        with _store_errors(f"s3://{bucket}/{key}"):
            obj = self._client().get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
            with target.open("wb") as out:
                for chunk in obj["Body"].iter_chunks(1 << 20):
                    out.write(chunk)
                    total += len(chunk)
        return total

    def _fetch_s3(self, bucket: str, prefix: str, dest: Path) -> int:
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        # ChecksumMode (in _get) makes boto3 verify the stored SHA256 while reading.
        return sum(self._get(bucket, prefix + name, dest / name) for name in ADAPTER_FILES)


@contextlib.contextmanager
def _store_errors(where: str) -> Iterator[None]:
    """boto3's errors as FetchError (missing, refused) or StoreUnavailable (transient)."""
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

    try:
        yield
    except (ConnectionError, HTTPClientError) as exc:
        raise StoreUnavailable(f"object store unreachable: {type(exc).__name__}") from exc
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if int(status) >= 500:
            raise StoreUnavailable(f"object store failing: HTTP {status}") from exc
        raise FetchError(f"{where}: {exc}") from exc
    except BotoCoreError as exc:
        raise FetchError(f"{where}: {exc}") from exc


def _refuse_tenant_links(folder: Path, tenant: str) -> None:
    """A file:// adapter folder whose tenant part holds a symbolic link is refused.

    The operator and gateway check the weightsUri's text (`<source>/<tenant>/...`), but on a
    shared file system a tenant writes its own folder: a link there (the adapter folder, or
    adapter_model.safetensors, pointing at another tenant's folder or any file the agent can
    read) would have the agent copy, hash and report (a checksum mismatch names the hash it
    found) what lies outside it. Links above the tenant folder (how the source is mounted) are
    the installer's and allowed.
    """
    parts = folder.parts
    if tenant not in parts:
        return  # not the <source>/<tenant>/ layout; the operator refuses such a weightsUri
    at = parts.index(tenant)
    paths = [Path(*parts[: i + 1]) for i in range(at, len(parts))]
    paths += [folder / name for name in ADAPTER_FILES]
    linked = [p for p in paths if p.is_symlink()]
    if linked:
        where = linked[0].relative_to(Path(*parts[:at]))
        raise FetchError(
            f"{where} is a symbolic link: adapter folders and files must be real ones "
            "under the tenant's folder"
        )


def _fetch_file(folder: Path, dest: Path) -> int:
    total = 0
    for name in ADAPTER_FILES:
        src = folder / name
        if not src.is_file():
            raise FetchError(f"{name}: no such file in the adapter's folder")
        shutil.copyfile(src, dest / name)
        total += src.stat().st_size
    return total
