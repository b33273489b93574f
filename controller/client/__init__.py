"""What applications import: ``ManagedConsumer`` (and the worker built on it), and, for
fleets on Kafka's own group protocol without a controller, ``group_assignor`` and
``GroupLag``. Depends on ``controller.wire`` only (enforced in ``scripts/check``)."""

from controller.client.consumer import ManagedConsumer
from controller.client.group_lag import GroupLag
from controller.wire.group_protocol import group_assignor

__all__ = ["GroupLag", "ManagedConsumer", "group_assignor"]
