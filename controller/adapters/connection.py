"""How every Kafka client Ballast builds connects: bootstrap servers, TLS and SASL from
the config (the client library's consumers are built by their applications)."""

from __future__ import annotations

from typing import Any

from aiokafka.helpers import create_ssl_context

from controller.config import Config


def client_options(cfg: Config) -> dict[str, Any]:
    """Connection settings shared by every Kafka client of the controller: bootstrap,
    TLS and SASL. The password leaves the config only here, into the client."""
    k = cfg.kafka
    opts: dict[str, Any] = {
        "bootstrap_servers": k.bootstrap_servers,
        "security_protocol": k.security_protocol,
    }
    if k.security_protocol in ("SSL", "SASL_SSL"):
        opts["ssl_context"] = create_ssl_context(
            cafile=str(k.ssl_cafile) if k.ssl_cafile else None,
            certfile=str(k.ssl_certfile) if k.ssl_certfile else None,
            keyfile=str(k.ssl_keyfile) if k.ssl_keyfile else None,
            password=k.ssl_key_password.get_secret_value() if k.ssl_key_password else None,
        )
    if k.sasl_mechanism and k.sasl_password is not None:
        opts["sasl_mechanism"] = k.sasl_mechanism
        opts["sasl_plain_username"] = k.sasl_username
        opts["sasl_plain_password"] = k.sasl_password.get_secret_value()
    return opts
