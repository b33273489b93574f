"""What applications import: ``ManagedConsumer`` with its ``PresenceOptions`` (and
``MqttAuth``), and, for
fleets on Kafka's own group protocol without a controller, ``group_assignor`` and
``GroupLag``. Uses ``controller.wire`` and ``controller.adapters``, never the daemon
(enforced in ``scripts/check``)."""

from controller.adapters.group_protocol import group_assignor
from controller.adapters.presence import MqttAuth
from controller.client.announcer import PresenceOptions
from controller.client.consumer import ManagedConsumer
from controller.client.group_lag import GroupLag

__all__ = ["GroupLag", "ManagedConsumer", "MqttAuth", "PresenceOptions", "group_assignor"]
