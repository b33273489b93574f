"""The controller's ``kafka:`` connection settings (bootstrap, TLS, SASL) as options of the
lag job's Kafka source and sink, so the job reads and writes a secured cluster exactly as
the controller does.

Two spellings of the same settings: Ballast's own source (``pipeline.kafka_format:
ballast_kafka``) takes aiokafka's names (``kafka.sasl.plain.password``), Spark's native
connector (``kafka``) the Java client's (``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location`` with ``PEM``). Secrets travel as option values;
``session.REDACTED_OPTIONS`` keeps them out of plans and the UI.
"""

from __future__ import annotations

from controller.config import Config, KafkaSettings

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def kafka_options(cfg: Config) -> dict[str, str]:
    """Options for ``readStream``/``writeStream`` in the configured ``kafka_format``."""
    k = cfg.kafka
    base = {"kafka.bootstrap.servers": k.bootstrap_servers}
    if k.security_protocol != "PLAINTEXT":
        base["kafka.security.protocol"] = k.security_protocol
    if cfg.pipeline.kafka_format == "kafka":
        return base | _java_tls(k) | _java_sasl(k)
    return base | _aiokafka_tls(k) | _aiokafka_sasl(k)


def _aiokafka_tls(k: KafkaSettings) -> dict[str, str]:
    out = {
        f"kafka.ssl.{name}": str(path)
        for name, path in (
            ("cafile", k.ssl_cafile),
            ("certfile", k.ssl_certfile),
            ("keyfile", k.ssl_keyfile),
        )
        if path is not None
    }
    if k.ssl_key_password is not None:
        out["kafka.ssl.password"] = k.ssl_key_password.get_secret_value()
    return out


def _aiokafka_sasl(k: KafkaSettings) -> dict[str, str]:
    if k.sasl_mechanism is None or k.sasl_password is None:
        return {}
    return {
        "kafka.sasl.mechanism": k.sasl_mechanism,
        "kafka.sasl.plain.username": k.sasl_username or "",
        "kafka.sasl.plain.password": k.sasl_password.get_secret_value(),
    }


def _java_tls(k: KafkaSettings) -> dict[str, str]:
    """PEM files as the Java client reads them (Kafka >= 2.7): a CA file as the trust
    store; a client certificate and key as inline PEM (its key store)."""
    out: dict[str, str] = {}
    if k.ssl_cafile is not None:
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = str(k.ssl_cafile)
    if k.ssl_certfile is not None and k.ssl_keyfile is not None:
        out["kafka.ssl.keystore.type"] = "PEM"
        out["kafka.ssl.keystore.certificate.chain"] = k.ssl_certfile.read_text()
        out["kafka.ssl.keystore.key"] = k.ssl_keyfile.read_text()
        if k.ssl_key_password is not None:
            out["kafka.ssl.key.password"] = k.ssl_key_password.get_secret_value()
    return out


def _java_sasl(k: KafkaSettings) -> dict[str, str]:
    if k.sasl_mechanism is None or k.sasl_password is None:
        return {}
    user = _jaas_quote(k.sasl_username or "")
    password = _jaas_quote(k.sasl_password.get_secret_value())
    return {
        "kafka.sasl.mechanism": k.sasl_mechanism,
        "kafka.sasl.jaas.config": (
            f'{_LOGIN_MODULES[k.sasl_mechanism]} required username="{user}" password="{password}";'
        ),
    }


def _jaas_quote(value: str) -> str:
    """A JAAS option value inside double quotes: backslash and quote escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
