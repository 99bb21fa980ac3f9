"""A Kubernetes API emulator (kmock) in its own thread and event loop, with sync helpers.

What kmock needs to host kopf, and the gaps worked around here (see docs/reference/operator.md):

- every resource must be declared with its verbs (else kopf logs "Non-watchable resources"
  and ignores it), plus `customresourcedefinitions` and `namespaces`, and the namespace
  object must exist, else kopf waits silently;
- kmock 0.8 cannot parse the cluster-scoped path `/api/v1/namespaces` (it reads it as a
  namespaced path with no namespace and answers 500); `_parse_path` below fixes that path;
- kmock takes a GET as a watch only for `?watch=true` exactly, and answers any other spelling
  with a plain list; kubernetes_asyncio sends `?watch=True`, so its watch stream ended at once
  ("Malformed JSON response") and a client re-listed in a loop instead of following events.
  `_guess_k8s` below reads `watch` as the API server does (`watching`);
- no resourceVersion and so no optimistic concurrency: kmock never sets one and applies a
  merge patch carrying a stale one (and a JSON patch whose `test` of it fails answers 500,
  not the API server's 422). The Emulator below does what the API server does: every
  create and every PATCH gives the object a new resourceVersion, a PATCH whose body names
  another resourceVersion than the object's is refused with 409 Conflict, and a JSON patch
  whose `test` of it fails with 422 (kopf guards its finalizer patches that way, and retries
  on a 422). kmock serves no PUT (replace) at all;
- no label selectors: kmock answers a list or watch with every object whatever its
  `labelSelector`, so a product query with a wrong selector passed every test. The Emulator
  below filters lists and watch events by it as the API server does (`LabelSelector`), and
  answers a malformed one with 400. `fieldSelector` is still ignored (no product code sends
  one);
- no StatefulSet controller (tests create the replica pods), no garbage collection by
  ownerReferences, no schema/CEL validation, no generation bumps, no `generateName` (the
  Emulator below names such objects, else every kopf event after the first is refused with
  409), and a
  request log that makes each request cost O(all requests so far) (the Emulator below
  trims it).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import attrs
import httpx
import kmock
from kmock._internal import parsing, rendering

from tests import waiting

_original_parse_path = parsing.parse_path


def _parse_path(path: str) -> parsing.ParsedPath:
    bits = path.strip("/").split("/")
    if bits[-1] == "namespaces" and bits[0] == "api" and len(bits) == 3:
        return parsing.ParsedPath("", bits[1], "namespaces", None, None, None)
    if len(bits) == 4 and bits[0] == "api" and bits[2] == "namespaces":  # /api/v1/namespaces/x
        return parsing.ParsedPath("", bits[1], "namespaces", None, bits[3], None)
    return _original_parse_path(path)


parsing.parse_path = _parse_path


def watching(query: Mapping[str, str]) -> bool:
    """Whether a request's query asks for a watch, read as the API server reads a boolean query
    parameter (apimachinery's `Convert_Slice_string_To_bool`): present and neither `0` nor
    `false` in any case, so `true`, `True` and `1` all watch."""
    value = query.get("watch")
    return value is not None and value != "0" and value.lower() != "false"


_original_guess_k8s = parsing.guess_k8s


def _guess_k8s(
    k8s: parsing.ParsedPath, method: kmock.method, query: dict[str, str]
) -> kmock.action | None:
    # kmock's own check is `query.get('watch') == 'true'`: hand it the spelling it knows.
    if "watch" in query:
        query = {**query, "watch": "true" if watching(query) else "false"}
    return _original_guess_k8s(k8s, method, query)


parsing.guess_k8s = _guess_k8s


_SELECTOR_TOKEN = re.compile(r"\s*(==|!=|=|!|<|>|\(|\)|,|[^\s=!<>(),]+)")
# A label key: an optional DNS-subdomain prefix and a name of up to 63 characters; a label
# value: up to 63 such characters, or empty (apimachinery's validation of both).
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@attrs.frozen
class Requirement:
    """One requirement of a label selector: `key <op> values`."""

    key: str
    op: str  # exists, !, =, !=, in, notin, >, <
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in {"=", "in"}:
            return has and value in self.values
        if self.op in {"!=", "notin"}:
            return not has or value not in self.values
        # > and <: the label's value read as an integer; one that is not never matches.
        try:
            number = int(str(value))
        except ValueError:
            return False
        (bound,) = self.values
        return number > int(bound) if self.op == ">" else number < int(bound)


class SelectorError(ValueError):
    pass


def _valid_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)):
        return False
    return bool(_LABEL_NAME.match(name))


def _valid_value(value: str) -> bool:
    return value == "" or bool(_LABEL_NAME.match(value))


_OPERATORS = {"==", "!=", "=", "!", "<", ">", "(", ")", ","}


@attrs.frozen
class LabelSelector:
    """A `labelSelector` as the API server parses it (apimachinery's `labels.Parse`):
    comma-separated requirements, all of which must hold; the empty selector matches all."""

    requirements: tuple[Requirement, ...]

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        tokens: list[str] = _SELECTOR_TOKEN.findall(text)
        return cls(tuple(_Parser(tokens).requirements())) if tokens else cls(())

    def matches(self, obj: Any) -> bool:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        labels = (meta.get("labels") if isinstance(meta, Mapping) else None) or {}
        return all(r.matches(labels) for r in self.requirements)


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str | None:
        tok = self.peek()
        self.i += 1
        return tok

    @staticmethod
    def fail(found: str | None, expected: str) -> SelectorError:
        return SelectorError(f"unable to parse requirement: found {found or ''!r}, {expected}")

    def key(self) -> str:
        tok = self.take()
        if tok is None or tok in _OPERATORS:
            raise self.fail(tok, "expected: identifier")
        if not _valid_key(tok):
            raise SelectorError(f"unable to parse requirement: invalid label key {tok!r}")
        return tok

    def value(self) -> str:
        """A value, empty where the next token ends it (`k=` selects the empty value)."""
        tok = self.peek()
        if tok is None or tok in {",", ")"}:
            return ""
        self.i += 1
        if tok in _OPERATORS or not _valid_value(tok):
            raise SelectorError(f"unable to parse requirement: invalid label value {tok!r}")
        return tok

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.i += 1
            return Requirement(self.key(), "!")
        key = self.key()
        op = self.peek()
        if op is None or op == ",":
            return Requirement(key, "exists")
        self.i += 1
        if op in {"=", "=="}:
            return Requirement(key, "=", frozenset({self.value()}))
        if op == "!=":
            return Requirement(key, "!=", frozenset({self.value()}))
        if op in {"in", "notin"}:
            opening = self.take()
            if opening != "(":
                raise self.fail(opening, "expected: '('")
            if self.peek() == ")":
                raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
            values = {self.value()}
            while (tok := self.take()) == ",":
                values.add(self.value())
            if tok != ")":
                raise self.fail(tok, "expected: ')'")
            return Requirement(key, op, frozenset(values))
        if op in {"<", ">"}:
            bound = self.take()
            if bound is None or not re.fullmatch(r"-?[0-9]+", bound):
                raise SelectorError(
                    f"for 'Gt', 'Lt' operators, the value must be an integer, not {bound!r}"
                )
            return Requirement(key, op, frozenset({bound}))
        raise self.fail(op, "expected: in, notin, =, ==, !=, gt, lt")

    def requirements(self) -> list[Requirement]:
        out = [self.requirement()]
        while (tok := self.take()) is not None:
            if tok != ",":
                raise self.fail(tok, "expected: ','")
            out.append(self.requirement())
        return out


def label_selector(params: Mapping[str, str]) -> LabelSelector:
    """The request's `labelSelector`; a malformed one is refused with 400, as the API server
    refuses it."""
    try:
        return LabelSelector.parse(params.get("labelSelector") or "")
    except SelectorError as exc:
        raise kmock.KubernetesError(status=400, reason="BadRequest", message=str(exc)) from None


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator with a bounded request log and a count of writes.

    kmock matches every request against its whole request history (each reaction's filter
    iterates all past requests), so serving gets slower with every request: quadratic. With
    a few thousand requests a create takes seconds. Keeping the log short restores O(1).
    """

    write_log: list[tuple[str, str, str | None]] = attrs.field(factory=list)
    # (path, Content-Type, fieldManager) of every PATCH: what the client asked for, since
    # kmock itself applies every patch body as a merge patch.
    patch_log: list[tuple[str, str, str | None]] = attrs.field(factory=list)
    # The body of each of those PATCHes, in the same order: what was written, so a test can
    # tell a write that changed something from one that repeated what was there.
    patch_bodies: list[Any] = attrs.field(factory=list)
    # Seconds each write takes before it is served: a slow API server, so a test can stop an
    # operator while one of its passes is still writing (pacing, not synchronisation).
    write_delay_s: float = 0.0
    # Seconds a plain list (not a watch) of a plural takes: one watch's initial list arriving
    # well after the others', as on a busy API server (pacing, not synchronisation).
    list_delay_s: dict[str, float] = attrs.field(factory=dict)
    _versions: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _versions_lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    async def _handle(self, request: rendering.Request) -> Any:
        # Keep the newest few: a request is matched right after it is logged, so only
        # requests still waiting for the emulator's lock need to stay; 32 is ample.
        if len(self._requests) > 64:
            del self._requests[:-32]
        method = request.method.value
        plural = request.resource.plural if request.resource is not None else None
        if request.action in {kmock.action.LIST, kmock.action.WATCH}:
            label_selector(request.params)  # a malformed one: 400 before anything streams
        # A list, not a watch (`_guess_k8s` above decided which, as the API server does).
        if request.action == kmock.action.LIST and plural in self.list_delay_s:
            await asyncio.sleep(self.list_delay_s[plural])
        if method in {"POST", "PATCH", "PUT", "DELETE"} and self.write_delay_s:
            await asyncio.sleep(self.write_delay_s)  # before it is logged and applied
        if method == "POST" and request.url.path.endswith(
            ("/tokenreviews", "/subjectaccessreviews")
        ):
            # A real API server stores no review; kmock stores every create under its
            # name, and a second nameless review would be refused with 409: name each one.
            request.data.setdefault("metadata", {})
        meta = request.data.get("metadata") if isinstance(request.data, dict) else None
        if method == "POST" and isinstance(meta, dict) and not meta.get("name"):
            # kmock ignores generateName (kopf's events use it): name them like the server.
            meta["name"] = f"{meta.get('generateName', 'obj-')}{next(_suffixes):06d}"
        if method == "POST" and isinstance(meta, dict):
            # A real API server gives every object a uid (owner references name it).
            meta.setdefault("uid", f"uid-{meta.get('name', '')}-{time.time_ns()}")
        if method in {"POST", "PATCH", "PUT", "DELETE"} and request.resource is not None:
            self.write_log.append((method, request.resource.plural or "", request.name))
        if method == "PATCH":
            headers = {k.lower(): v for k, v in request.headers.items()}
            ctype = headers.get("content-type", "").split(";")[0]
            self.patch_log.append((request.url.path, ctype, request.params.get("fieldManager")))
            self.patch_bodies.append(copy.deepcopy(request.data))  # as sent, not as stamped
        if method not in {"POST", "PATCH"} or request.resource is None:
            return await super()._handle(request)
        # The check, the new resourceVersion and kmock's write happen as one step: no other
        # write of the namespace may land between a precondition's check and the write.
        async with self._versions_lock:
            if method == "PATCH":
                self._check_precondition(request)
            self._stamp_version(request)
            return await super()._handle(request)

    async def _serve_list(self, request: rendering.Request) -> Any:
        selector = label_selector(request.params)
        payload = await super()._serve_list(request)
        payload["items"] = [obj for obj in payload["items"] if selector.matches(obj)]
        return payload

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[Any]:
        """Only the events of objects the selector selects, as the API server's watch cache
        sends them: an object that comes to match arrives as ADDED, and one that stops matching
        as DELETED (its new state), so a client's view stays the selected set."""
        selector = label_selector(request.params)
        shown: set[tuple[str | None, str | None]] = set()
        async for event in super()._serve_watch(request):
            obj = event.get("object") if isinstance(event, dict) else None
            if not isinstance(obj, Mapping):
                yield event  # the stream's opening bytes, an error, a bookmark
                continue
            meta = obj.get("metadata") or {}
            key = (meta.get("namespace"), meta.get("name"))
            was, now = key in shown, selector.matches(obj)
            kind = event.get("type")
            if kind == "DELETED":
                shown.discard(key)
                if was:
                    yield event
            elif now:
                shown.add(key)
                yield event if was else {**event, "type": "ADDED"}
            elif was:
                shown.discard(key)
                yield {**event, "type": "DELETED"}

    def _check_precondition(self, request: rendering.Request) -> None:
        """Refuse a PATCH whose body names a resourceVersion the object no longer has, as the
        API server does: 409 for one in the body's metadata (a merge or strategic patch),
        422 for a JSON patch's failed `test` of /metadata/resourceVersion."""
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects:  # kmock's array of objects has no .get()
            return  # kmock answers 404
        stored = self._objects[key]
        if stored.deleted:
            return  # kmock answers 404
        current = (stored.get("metadata") or {}).get("resourceVersion")
        if isinstance(request.data, dict):
            wanted = (request.data.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and str(wanted) != current:
                raise kmock.KubernetesError(
                    status=409,
                    reason="Conflict",
                    message=f"Operation cannot be fulfilled on {request.resource.plural} "
                    f'"{request.name}": the object has been modified; please apply your '
                    "changes to the latest version and try again",
                )
        elif isinstance(request.data, list):
            for op in request.data:
                if (
                    isinstance(op, dict)
                    and op.get("op") == "test"
                    and op.get("path") == "/metadata/resourceVersion"
                    and op.get("value") != current
                ):
                    raise kmock.KubernetesError(
                        status=422,
                        reason="Invalid",
                        message=f"the server rejected our request: test failed: "
                        f"/metadata/resourceVersion is {current!r}, not {op.get('value')!r}",
                    )

    def _stamp_version(self, request: rendering.Request) -> None:
        """Give the object written a new resourceVersion, as the API server does for every
        change (kmock applies a PATCH's body to the object, so it goes into the body)."""
        version = str(next(self._versions))
        if isinstance(request.data, dict):
            request.data.setdefault("metadata", {})
            if isinstance(request.data["metadata"], dict):
                request.data["metadata"]["resourceVersion"] = version
        elif isinstance(request.data, list):
            request.data.append(
                {"op": "add", "path": "/metadata/resourceVersion", "value": version}
            )


_suffixes = itertools.count(1)
VERBS = {"get", "list", "watch", "create", "patch", "update", "delete"}
RESOURCES: dict[str, tuple[str, bool, set[str]]] = {
    "lorafleet.dev/v1alpha1/loraadapters": ("LoRAAdapter", True, {"status"}),
    "lorafleet.dev/v1alpha1/adapteraliases": ("AdapterAlias", True, {"status"}),
    "lorafleet.dev/v1alpha1/replicapools": ("ReplicaPool", True, {"status", "scale"}),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False, set()),
    "v1/namespaces": ("Namespace", False, set()),
    "v1/pods": ("Pod", True, {"status"}),
    "v1/services": ("Service", True, set()),
    "v1/events": ("Event", True, set()),
    "v1/secrets": ("Secret", True, set()),
    "apps/v1/statefulsets": ("StatefulSet", True, {"status", "scale"}),
    "policy/v1/poddisruptionbudgets": ("PodDisruptionBudget", True, {"status"}),
    "batch/v1/jobs": ("Job", True, {"status"}),
}


class Cluster:
    def __init__(self, namespace: str = "lf") -> None:
        self.namespace = namespace
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.emulator: Any = None
        self.url = ""
        self._thread = threading.Thread(target=self._serve, name="kmock", daemon=True)
        self._thread.start()
        if not self._ready.wait(20):
            raise RuntimeError("kmock did not start")
        # 30 s: at a load average of 15 on 2 cores a list of 60 adapters beside two operators
        # took over 10 s to be served (the emulator shares the machine, not a hang).
        self.http = httpx.Client(base_url=self.url, timeout=30)
        self.create("/api/v1/namespaces", {"metadata": {"name": namespace}})

    def _serve(self) -> None:
        async def main() -> None:
            emu = Emulator()
            for key, (kind, namespaced, subs) in RESOURCES.items():
                emu.resources[key] = kmock.ResourceInfo(
                    kind=kind, namespaced=namespaced, verbs=VERBS, subresources=subs
                )
            async with emu, kmock.Server(emu) as server:
                self.emulator = emu
                self.url = str(server.url).rstrip("/")
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                self._ready.set()
                await self._stop.wait()

        asyncio.run(main())

    def close(self) -> None:
        self.http.close()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    # ------------------------------------------------------------------ paths and CRUD

    def path(
        self, plural: str, name: str | None = None, group: str = "lorafleet.dev/v1alpha1"
    ) -> str:
        root = "/api/v1" if group == "v1" else f"/apis/{group}"
        base = f"{root}/namespaces/{self.namespace}/{plural}"
        return f"{base}/{name}" if name else base

    def create(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        body.setdefault("metadata", {})
        if "/namespaces/" in collection:
            body["metadata"].setdefault("namespace", self.namespace)
        body["metadata"].setdefault(
            "creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        )
        body["metadata"].setdefault("uid", f"uid-{body['metadata']['name']}-{time.time_ns()}")
        r = self.http.post(collection, json=body)
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out

    def get(self, path: str) -> dict[str, Any] | None:
        r = self.http.get(path)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.patch(
            path, json=body, headers={"Content-Type": "application/merge-patch+json"}
        )
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out

    def delete(self, path: str) -> None:
        self.http.delete(path).raise_for_status()

    def items(self, collection: str) -> list[dict[str, Any]]:
        r = self.http.get(collection)
        r.raise_for_status()
        out: list[dict[str, Any]] = r.json()["items"]
        return out

    def writes(self, plural: str | None = None) -> int:
        """Write requests (create/patch/delete) the emulator has served, optionally by plural."""
        return sum(1 for _, p, _ in list(self.emulator.write_log) if plural in (None, p))

    def patch_types(self, path_suffix: str) -> set[tuple[str, str | None]]:
        """(Content-Type, fieldManager) of the PATCHes sent to paths ending in `path_suffix`."""
        return {(t, m) for p, t, m in list(self.emulator.patch_log) if p.endswith(path_suffix)}

    def writes_by_name(self, plural: str) -> dict[str, int]:
        """PATCH requests per object name of one resource."""
        out: dict[str, int] = {}
        for method, p, name in list(self.emulator.write_log):
            if method == "PATCH" and p == plural and name:
                out[name] = out.get(name, 0) + 1
        return out


# Operator tests wait on a reconciler running in another thread: longer, and reading an object
# that is not there yet (a KeyError on a missing status) counts as "not yet".
# Typed loosely: checks here return raw JSON (dicts), often as `cond and obj`.
eventually: Callable[..., Any] = functools.partial(
    waiting.eventually,
    within_s=20.0,
    interval_s=0.1,
    ignore=(KeyError, TypeError, IndexError, AttributeError),
)
