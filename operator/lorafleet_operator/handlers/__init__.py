"""Thin kopf handlers, one module per resource; importing this package registers them all."""

from lorafleet_operator.handlers import (
    adapters,
    aliases,
    autoscaler,
    lifecycle,
    pods,
    pools,
)

__all__ = ["adapters", "aliases", "autoscaler", "lifecycle", "pods", "pools"]
