"""The `error.code` values an agent answers with, which its callers act on.

An agent's error body (lorafleet_core.wire.openai_errors) names what went wrong in `code`; the
gateway decides by it whether to load the adapter and retry, try the next replica, or answer
the client (lorafleet_gateway.replica_errors), and the control API passes it on. Both sides
spell each code through this enum, so a renamed code is an import error, never a silent
mismatch. Codes about the shape of a request (`invalid_request`, `request_too_large`, ...)
belong to each server's HTTP edge, not here.
"""

from enum import StrEnum


class ErrorCode(StrEnum):
    # The data port: the adapter named in `model`.
    # 404: the agent holds no record of the adapter; post it to the load endpoint first.
    ADAPTER_NOT_REGISTERED = "adapter_not_registered"
    # 422: the adapter's files failed verification; no replica will do better (never retried).
    ADAPTER_REJECTED = "adapter_rejected"
    # 502: fetching or registering the adapter failed on this replica; another may succeed.
    ADAPTER_LOAD_FAILED = "adapter_load_failed"
    # 503: the object store could not be reached for an adapter not cached here (the control
    # API says the same of its own store: retry later, the adapter itself is fine).
    STORE_UNAVAILABLE = "store_unavailable"
    # 503: vLLM is starting, gone or hung; nothing reached the engine.
    ENGINE_UNAVAILABLE = "engine_unavailable"
    # 503: every slot is pinned by running requests.
    CACHE_FULL = "cache_full"

    # The internal port (load, unload, forget).
    # 409: a different record for an adapter id the agent already holds.
    RECORD_CONFLICT = "record_conflict"
    # 409: the adapter has running requests.
    ADAPTER_BUSY = "adapter_busy"
    # 409: forget named the adapter a merged pool serves in its weights; only new pods drop it.
    MERGED_ADAPTER = "merged_adapter"
    # 404: the path names another replica than the one that answered.
    WRONG_REPLICA = "wrong_replica"
    # 503: the caller's credential could not be checked (TokenReview unreachable): fail closed.
    AUTH_UNAVAILABLE = "auth_unavailable"
