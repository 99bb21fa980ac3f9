"""Fetching an adapter's two files from the object store into a folder (boto3 or file://).

Only the files vLLM reads (lorafleet_core.adapter_files.ADAPTER_FILES) are fetched; anything
else under the prefix is ignored. Callers download into a temporary folder and rename it into
the cache only after verification (see lorafleet_agent.disk_cache), so a partial or corrupt
download is never visible under an adapter's name.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lorafleet_core.adapter_files import ADAPTER_FILES


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

    def fetch(self, uri: str, dest: Path) -> int:
        """Copy the adapter files under `uri` into the existing folder `dest`; returns bytes."""
        parsed = urlparse(uri)
        if parsed.scheme == "s3":
            return self._fetch_s3(parsed.netloc, parsed.path.lstrip("/"), dest)
        if parsed.scheme == "file":
            return _fetch_file(Path(unquote(parsed.path)), dest)
        raise FetchError(f"unsupported weights URI scheme {parsed.scheme!r}")

    def _fetch_s3(self, bucket: str, prefix: str, dest: Path) -> int:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectionError,
            HTTPClientError,
        )

        if prefix and not prefix.endswith("/"):
            prefix += "/"
        total = 0
        for name in ADAPTER_FILES:
            try:
                # ChecksumMode makes boto3 verify the stored SHA256 while reading.
                obj = self._client().get_object(
                    Bucket=bucket, Key=prefix + name, ChecksumMode="ENABLED"
                )
                with (dest / name).open("wb") as out:
                    for chunk in obj["Body"].iter_chunks(1 << 20):
                        out.write(chunk)
                        total += len(chunk)
            except (ConnectionError, HTTPClientError) as exc:
                raise StoreUnavailable(f"object store unreachable: {type(exc).__name__}") from exc
            except ClientError as exc:
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if int(status) >= 500:
                    raise StoreUnavailable(f"object store failing: HTTP {status}") from exc
                raise FetchError(f"s3://{bucket}/{prefix}{name}: {exc}") from exc
            except BotoCoreError as exc:
                raise FetchError(f"s3://{bucket}/{prefix}{name}: {exc}") from exc
        return total


def _fetch_file(folder: Path, dest: Path) -> int:
    total = 0
    for name in ADAPTER_FILES:
        src = folder / name
        if not src.is_file():
            raise FetchError(f"{src}: no such file")
        shutil.copyfile(src, dest / name)
        total += src.stat().st_size
    return total
