"""What applications import: ``ManagedConsumer`` (and the worker built on it).
Depends on ``controller.wire`` only (enforced in ``scripts/check``)."""

from controller.client.consumer import ManagedConsumer

__all__ = ["ManagedConsumer"]
