"""The four places an adapter can be on a replica, fastest first."""

from enum import StrEnum


class Tier(StrEnum):
    """Where a replica found an adapter when a request arrived.

    gpu: registered in a vLLM GPU LoRA slot; ram: in vLLM's host-RAM LoRA cache;
    disk: in the agent's cache folder; remote: only in the object store.
    """

    GPU = "gpu"
    RAM = "ram"
    DISK = "disk"
    REMOTE = "remote"
