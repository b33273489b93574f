"""A refused Kafka login, told apart from a broker that is not there yet.

aiokafka folds every failure to bootstrap into one ``KafkaConnectionError`` ("Unable to
bootstrap"), so a wrong SASL password or a broker certificate the CA does not vouch for
looked like a broker still starting, and was retried for ``startup.timeout``. After such
a failure one direct connection, made with the same settings, shows which it was.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

#: How long the one direct connection may take (s).
PROBE_TIMEOUT = 5.0
_CONNECTION = ("security_protocol", "ssl_context", "sasl_mechanism")
_LOGIN = ("sasl_plain_username", "sasl_plain_password")


async def refused_login(options: Mapping[str, Any]) -> str | None:
    """Why the first bootstrap server refuses these client ``options`` (SASL or TLS
    verification), or None when it does not (it may be down: that is retried)."""
    first = str(options["bootstrap_servers"]).split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        return None
    settings = {k: options[k] for k in (*_CONNECTION, *_LOGIN) if k in options}
    try:
        conn = await create_conn(
            host.strip("[]"), int(port), request_timeout_ms=round(PROBE_TIMEOUT * 1000), **settings
        )
    except (
        AuthenticationFailedError,
        AuthenticationMethodNotSupported,
        SaslAuthenticationFailed,
        UnsupportedSaslMechanismError,
    ) as exc:
        return f"the SASL login was refused ({_first_line(exc)})"
    except ssl.SSLCertVerificationError as exc:
        return f"the broker's TLS certificate did not verify ({exc.verify_message})"
    except Exception:  # refused, reset, timed out: not there yet, retried
        return None
    conn.close()
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
