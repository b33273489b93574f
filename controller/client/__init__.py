"""What applications import: ``ManagedConsumer`` (aiokafka) with its ``PresenceOptions``
(and ``MqttAuth``), and, for fleets on Kafka's own group protocol without a controller,
``group_assignor`` and ``GroupLag``. Uses ``controller.wire`` and ``controller.adapters``,
never the daemon (enforced in ``scripts/check``).

Names load on first use (PEP 562): a binding for another client library
(``controller.client.confluent``) imports this package without loading aiokafka."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.adapters.group_protocol import group_assignor
    from controller.adapters.presence import MqttAuth
    from controller.client.consumer import ManagedConsumer
    from controller.client.group_lag import GroupLag
    from controller.client.identity import PresenceOptions

_HOMES = {
    "group_assignor": "controller.adapters.group_protocol",
    "MqttAuth": "controller.adapters.presence",
    "PresenceOptions": "controller.client.identity",
    "ManagedConsumer": "controller.client.consumer",
    "GroupLag": "controller.client.group_lag",
}

__all__ = ["GroupLag", "ManagedConsumer", "MqttAuth", "PresenceOptions", "group_assignor"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
