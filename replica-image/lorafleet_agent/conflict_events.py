"""A record conflict, told to Kubernetes: a Warning Event on the LoRAAdapter of that id.

A second, different record for an adapter id the agent holds is refused (409, a metric, an
ERROR log: lorafleet_agent.held_records). On a cluster an SRE looks at `kubectl describe lora <id>`,
so the agent also posts a core/v1 Event there: reason `RecordConflict`, type Warning, a message
naming the replica and both checksums shortened (no secrets: checksums and ids are not).
When the LoRAAdapter does not exist (someone posts records for an id the registry never had),
the Event is about the agent's own pod instead.

No event storm: repeats of one conflict (same replica, id and both checksums) are one Event
whose `count` grows, as kubectl shows "x5 over 3m". It is written at most once per
`interval_s` (the first occurrence at once, later ones coalesced into one patch of the count),
and at most `max_tracked` conflicts are tracked (the oldest is forgotten first). The Event's
name is derived from the conflict, so a restarted agent continues the same Event's count.
Writing an Event never blocks or fails the refused call: errors are logged and dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from lorafleet_core.api import reasons
from lorafleet_core.api.names import GROUP, PLURAL_ADAPTER, VERSION
from lorafleet_core.kube.client import STRATEGIC_MERGE_PATCH, is_conflict, is_not_found
from lorafleet_core.wire.records import AdapterRecord

log = logging.getLogger(__name__)

REASON = reasons.RECORD_CONFLICT
COMPONENT = "lorafleet-agent"


def short(checksum: str) -> str:
    """`sha256:0123456789ab…`: enough to tell two versions apart in an Event."""
    algo, _, digest = checksum.partition(":")
    return f"{algo}:{digest[:12]}\u2026" if digest else checksum[:19]


def conflict_message(replica: str, held: AdapterRecord, offered: AdapterRecord) -> str:
    same = " (same checksum, other fields differ)" if held.checksum == offered.checksum else ""
    return (
        f"replica {replica} refused a second, different record for adapter {held.id}: it holds "
        f"checksum {short(held.checksum)}, was offered {short(offered.checksum)}{same}; "
        "the held record keeps serving"
    )


@dataclass
class _Tracked:
    name: str
    message: str
    count: int = 0  # occurrences seen
    written: int = 0  # occurrences the API server has
    base: int = 0  # the count a previous life of this agent left on the Event
    first: str = ""
    last: str = ""
    task: asyncio.Task[None] | None = None


class ConflictEvents:
    def __init__(
        self,
        api: Callable[[], Awaitable[client.ApiClient]],
        *,
        namespace: str,
        replica_id: str,
        pod_uid: str | None,
        interval_s: float = 30.0,
        max_tracked: int = 256,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self.replica_id = replica_id
        self.pod_uid = pod_uid
        self.interval_s = interval_s
        self.max_tracked = max_tracked
        self._tracked: OrderedDict[str, _Tracked] = OrderedDict()
        self.writes = 0  # Event creates and patches sent

    def report(self, held: AdapterRecord, offered: AdapterRecord) -> None:
        """Count one occurrence; the write happens in the background (call in the agent's loop)."""
        seen = f"{self.replica_id}|{held.model_dump_json()}|{offered.model_dump_json()}"
        key = hashlib.sha256(seen.encode()).hexdigest()
        entry = self._tracked.get(key)
        if entry is None:
            # Still a DNS subdomain when a long id is cut (no label may end in "-" or ".").
            name = f"{held.id[:200].rstrip('-.')}.recordconflict-{key[:12]}"
            entry = _Tracked(name=name, message=conflict_message(self.replica_id, held, offered))
            self._tracked[key] = entry
            while len(self._tracked) > self.max_tracked:
                _, dropped = self._tracked.popitem(last=False)
                if dropped.task is not None:
                    dropped.task.cancel()
        self._tracked.move_to_end(key)
        entry.count += 1
        entry.last = _now()
        entry.first = entry.first or entry.last
        if entry.task is None or entry.task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # called outside the agent's loop: counted, posted next time
                return
            entry.task = loop.create_task(self._flush(held.id, entry))

    async def _flush(self, adapter_id: str, entry: _Tracked) -> None:
        """Write until the API server has every occurrence, one write per interval at most."""
        try:
            while entry.written < entry.count:
                if entry.written:
                    await asyncio.sleep(self.interval_s)  # pacing, not synchronisation
                count = entry.count
                await self._write(adapter_id, entry, count)
                entry.written = count
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an Event is a courtesy: never fail the agent for it
            log.warning("could not post a %s Event for %s: %r", REASON, adapter_id, exc)

    async def _write(self, adapter_id: str, entry: _Tracked, count: int) -> None:
        api = await self._api()
        core = client.CoreV1Api(api)
        self.writes += 1
        if entry.written == 0:
            try:
                body = self._event(await self._involved(api, adapter_id), entry, count)
                await core.create_namespaced_event(self.namespace, body)
                return
            except Exception as exc:
                if not is_conflict(exc):
                    raise
            # A previous life of this agent posted it: continue its count.
            existing: Any = await core.read_namespaced_event(entry.name, self.namespace)
            entry.base = int(getattr(existing, "count", None) or 0)
        total = entry.base + count
        patch = {"count": total, "lastTimestamp": entry.last, "message": entry.message}
        await core.patch_namespaced_event(
            entry.name, self.namespace, patch, _content_type=STRATEGIC_MERGE_PATCH
        )

    async def _involved(self, api: client.ApiClient, adapter_id: str) -> dict[str, Any]:
        """The LoRAAdapter of that id (with its uid, so `kubectl describe` lists the Event),
        else this pod."""
        try:
            obj: Any = await client.CustomObjectsApi(api).get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL_ADAPTER, adapter_id
            )
            uid = (obj.get("metadata") or {}).get("uid")
            return {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "LoRAAdapter",
                "name": adapter_id,
                "namespace": self.namespace,
                **({"uid": uid} if uid else {}),
            }
        except Exception as exc:
            if not is_not_found(exc):
                log.info("LoRAAdapter %s unreadable (%r); the Event names the pod", adapter_id, exc)
        pod = {"apiVersion": "v1", "kind": "Pod", "name": self.replica_id}
        return {
            **pod,
            "namespace": self.namespace,
            **({"uid": self.pod_uid} if self.pod_uid else {}),
        }

    def _event(self, involved: dict[str, Any], entry: _Tracked, count: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": entry.name, "namespace": self.namespace},
            "involvedObject": involved,
            "reason": REASON,
            "type": "Warning",
            "message": entry.message,
            "count": count,
            "firstTimestamp": entry.first,
            "lastTimestamp": entry.last,
            "source": {"component": COMPONENT},
            "reportingComponent": f"{GROUP}/agent",
            "reportingInstance": self.replica_id,
        }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
