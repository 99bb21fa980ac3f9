"""Reading and writing a folder of Kubernetes manifests (what `kubectl apply -f DIR` takes).

The one reader of a manifests folder: the CLI's folder target, the standalone reconciler and
the gateway's folder catalog all see the same objects by the same rules. Users may write
files however they like (several documents per file, any file name); files the CLI creates are
named `<kind>-<name>.yaml` (lower-case kind) with one object each.

Only `*.yaml`, `*.yml` and `*.json` directly in the folder are read, as `kubectl apply -f DIR`
does (not recursive), so the hidden `.lorafleet/` subfolder holding standalone status files is
never mistaken for manifests. The replica endpoints file the standalone supervisor writes
beside the manifests (`replicas.yaml`, read by the gateway) is not a manifest either.
`*.json` files are parsed as JSON (YAML rejects tab-indented JSON); libyaml's loader is used
when present (~10x faster: 5,000 tenants' manifests load in seconds instead of a minute).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# Written by the standalone supervisor: replica endpoints, not Kubernetes objects.
REPLICA_FILES = ("replicas.yaml", "replicas.yml", "replicas.json")
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class LoadedObject:
    """One document of one manifest file."""

    path: Path
    index: int  # position of the document in its file
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        meta = self.body.get("metadata") or {}
        return str(meta.get("name", "")) if isinstance(meta, dict) else ""


@dataclass(frozen=True)
class FileError:
    path: Path
    message: str


@dataclass
class ManifestSet:
    objects: list[LoadedObject] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[LoadedObject]:
        return [o for o in self.objects if o.kind == kind]

    def find(self, kind: str, name: str) -> LoadedObject | None:
        for o in self.objects:
            if o.kind == kind and o.name == name:
                return o
        return None


def manifest_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file()
        and p.suffix in MANIFEST_SUFFIXES
        and not p.name.startswith(".")
        and p.name not in REPLICA_FILES
    )


def fingerprint(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """Cheap change detector: (name, mtime_ns, size) of every manifest file."""
    out = []
    for p in manifest_files(folder):
        try:
            st = p.stat()
        except FileNotFoundError:  # removed between listing and stat
            continue
        out.append((p.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _documents(path: Path) -> list[Any]:
    text = path.read_text()
    if path.suffix == ".json":
        return [json.loads(text)]
    return list(yaml.load_all(text, Loader=_Loader))


def load_file(path: Path) -> ManifestSet:
    """Every object in one manifest file; a document that does not parse becomes an error."""
    result = ManifestSet()
    try:
        docs = _documents(path)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        result.errors.append(FileError(path, f"cannot parse: {exc}"))
        return result
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict) or "kind" not in doc:
            result.errors.append(FileError(path, f"document {i} is not a Kubernetes object"))
            continue
        # A List (kubectl get -o yaml) holds its objects under items.
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            for item in doc["items"]:
                if isinstance(item, dict):
                    result.objects.append(LoadedObject(path, i, item))
            continue
        result.objects.append(LoadedObject(path, i, doc))
    return result


def load_folder(folder: Path) -> ManifestSet:
    """Every object in the folder; a file that does not parse becomes an error, not an abort."""
    result = ManifestSet()
    for path in manifest_files(folder):
        one = load_file(path)
        result.objects.extend(one.objects)
        result.errors.extend(one.errors)
    return result


MAX_FILE_NAME = 255  # bytes, what Linux and macOS file systems allow


def file_name_for(kind: str, name: str) -> str:
    """`<kind>-<name>.yaml`; a name too long for that (an object name may be 253 characters)
    keeps its start and gets 16 hex of a hash of the whole, so the file can be written."""
    plain = f"{kind.lower()}-{name}.yaml"
    if len(plain.encode()) <= MAX_FILE_NAME:
        return plain
    digest = hashlib.blake2b(name.encode(), digest_size=8).hexdigest()
    keep = MAX_FILE_NAME - len(f"{kind.lower()}--{digest}.yaml")
    return f"{kind.lower()}-{name[:keep]}-{digest}.yaml"


def atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a watcher never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix + ".part")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# Beside the standalone status files, so neither the manifests' readers nor a watcher see it.
LOCK_FILE = Path(".lorafleet") / "manifests.lock"


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold the folder's write lock: one writer at a time across processes (the control API,
    `lorafleet alias set`, `lorafleet up`) and threads, for a read-modify-write of its files.
    An fcntl.flock on a file of its own, released when the holder exits, however it exits.
    Not re-entrant: code holding it writes with `write_object_locked`."""
    path = folder / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def write_object(folder: Path, body: dict[str, Any]) -> Path:
    """Create or replace one object in the folder, under the folder's lock; returns the file
    written. See `write_object_locked`."""
    with folder_lock(folder):
        return write_object_locked(folder, body)


def write_object_locked(folder: Path, body: dict[str, Any]) -> Path:
    """`write_object` for a caller already holding `folder_lock(folder)`.

    An object that already exists is replaced where it is (its own file, or its document in a
    multi-document file, read and rewritten whole); a new one gets `<kind>-<name>.yaml`.
    """
    kind = str(body["kind"])
    name = str(body["metadata"]["name"])
    existing = load_folder(folder).find(kind, name)
    if existing is None:
        path = folder / file_name_for(kind, name)
        atomic_write(path, yaml.safe_dump(body, sort_keys=False))
        return path
    docs = _documents(existing.path)
    doc = docs[existing.index]
    if doc.get("kind") == "List":
        doc["items"] = [
            body
            if isinstance(i, dict)
            and i.get("kind") == kind
            and (i.get("metadata") or {}).get("name") == name
            else i
            for i in doc["items"]
        ]
    else:
        docs[existing.index] = body
    if existing.path.suffix == ".json":  # a JSON file holds one document and stays JSON
        atomic_write(existing.path, json.dumps(docs[0], indent=2) + "\n")
    else:
        atomic_write(existing.path, yaml.safe_dump_all(docs, sort_keys=False))
    return existing.path
