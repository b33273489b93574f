"""The lag job reaches a secured cluster with the controller's own ``kafka:`` settings:
they become options of both source/sink spellings, reach the Kafka client, never appear
in a plan, and work against a real TLS listener (Tansu behind a TLS proxy on loopback)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError

from controller.config import Config
from controller.tools import apache_kafka, embedded
from controller.wire.records import OffsetSample, partition_key
from tests.brokers import BROKER
from tests.certs import server_cert
from tests.pipeline.test_pipeline_e2e import lag_rows
from tests.tls_proxy import tls_proxy

pytest.importorskip("pyspark", reason="the pipeline extra is not installed")

from pyspark.sql import SparkSession

from pipeline import lagjob
from pipeline.connection import kafka_options
from pipeline.kafka_source import NAME, KafkaOptions

SECRET = 'pa"ss\\word-0x5eed'


def _config(fmt: str = "ballast_kafka", kafka: dict[str, object] | None = None) -> Config:
    return Config.model_validate(
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:9093", **(kafka or {})},
            "groups": [{"name": "g"}],
            "pipeline": {"kafka_format": fmt},
        }
    )


def _sasl_ssl(tmp_path: Path, mechanism: str = "SCRAM-SHA-512") -> dict[str, object]:
    ca = tmp_path / "ca.pem"
    ca.write_text("CA")
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_username": "lag-job",
        "sasl_password": SECRET,
        "ssl_cafile": str(ca),
    }


def test_plaintext_is_only_the_bootstrap(tmp_path: Path) -> None:
    for fmt in ("ballast_kafka", "kafka"):
        assert kafka_options(_config(fmt)) == {"kafka.bootstrap.servers": "127.0.0.1:9093"}


def test_ballast_source_gets_aiokafka_settings_that_reach_the_client(tmp_path: Path) -> None:
    opts = kafka_options(_config(kafka=_sasl_ssl(tmp_path)))
    assert opts == {
        "kafka.bootstrap.servers": "127.0.0.1:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.plain.username": "lag-job",
        "kafka.sasl.plain.password": SECRET,
        "kafka.ssl.cafile": str(tmp_path / "ca.pem"),
    }
    # What the source builds its consumer from (minus the CA, which must be a real file).
    parsed = KafkaOptions.parse({**opts, "subscribe": "s"} | {"kafka.ssl.cafile": ""}, reading=True)
    config = parsed.consumer_config()
    assert config["security_protocol"] == "SASL_SSL"
    assert config["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (config["sasl_plain_username"], config["sasl_plain_password"]) == ("lag-job", SECRET)
    assert isinstance(config["ssl_context"], ssl.SSLContext)


def test_native_connector_gets_java_client_settings(tmp_path: Path) -> None:
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nY\n-----END PRIVATE KEY-----\n")
    settings = _sasl_ssl(tmp_path, "PLAIN") | {
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
        "ssl_key_password": "key-Secret-1",
    }
    opts = kafka_options(_config("kafka", settings))
    assert opts["kafka.security.protocol"] == "SASL_SSL"
    assert opts["kafka.sasl.mechanism"] == "PLAIN"
    assert opts["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="lag-job" password="pa\\"ss\\\\word-0x5eed";'
    )
    assert opts["kafka.ssl.truststore.type"] == "PEM"
    assert opts["kafka.ssl.truststore.location"] == str(tmp_path / "ca.pem")
    assert opts["kafka.ssl.keystore.type"] == "PEM"
    assert opts["kafka.ssl.keystore.certificate.chain"] == cert.read_text()
    assert opts["kafka.ssl.keystore.key"] == key.read_text()
    assert opts["kafka.ssl.key.password"] == "key-Secret-1"
    scram = kafka_options(_config("kafka", _sasl_ssl(tmp_path, "SCRAM-SHA-256")))
    assert scram["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.scram.ScramLoginModule required"
    )


def test_secrets_never_reach_the_plan(spark: SparkSession) -> None:
    """Spark prints source options in plans, ``explain`` and the UI: every secret option
    is redacted there. Spark's own rule (``spark.redaction.regex``) catches a key or value
    that says password, secret or token; the inline PEM key of the native connector's
    mTLS says none of these, and only ``session.REDACTED_OPTIONS`` hides it: with Spark's
    default option regex it shows (so this check can fail)."""
    pem_key = "-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    secrets = {
        "kafka.sasl.plain.password": "hunter2-a1",
        "kafka.sasl.jaas.config": 'X required username="u" password="hunter2-b2";',
        "kafka.ssl.password": "hunter2-c3",
        "kafka.ssl.keystore.key": pem_key,
    }

    def plan() -> str:
        df = (
            spark.readStream.format(NAME)
            .options(**{"kafka.bootstrap.servers": "127.0.0.1:9", **secrets})
            .option("subscribe", "t")
            .load()
        )
        text: str = spark._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "extended")  # type: ignore[union-attr]
        return text

    shown = plan()
    assert "kafka.bootstrap.servers=127.0.0.1:9" in shown  # options are in the plan...
    assert not [s for s in ("hunter2", "MIIEvQIBADANBg") if s in shown]
    key = "spark.sql.redaction.options.regex"
    ours = spark.conf.get(key)
    assert ours is not None
    spark.conf.set(key, "(?i)url")  # Spark's default
    try:
        assert "MIIEvQIBADANBg" in plan()  # ...and without our regex the key would show
    finally:
        spark.conf.set(key, ours)


async def test_lag_job_over_a_real_tls_listener(spark: SparkSession, tmp_path: Path) -> None:
    """A broker reachable only over TLS (Kafka's own TLS listener; Tansu serves plaintext
    behind a TLS proxy whose port it advertises): every client of the job (driver and
    Python workers, source and sink) must speak TLS and verify the test CA to reach it."""
    tls = server_cert(tmp_path)
    with contextlib.ExitStack() as stack:
        if BROKER == "kafka":
            broker = apache_kafka.kafka(tmp_path, tls=(tls.cert, tls.key))
            stack.enter_context(broker.start(timeout=60.0))
            address = broker.address
        else:
            backend = embedded.free_port()
            proxy = tls_proxy(tmp_path, backend, tls.cert, tls.key)
            stack.enter_context(
                embedded.tansu(tmp_path, backend, advertised_port=proxy.port).start()
            )
            stack.enter_context(proxy.start())
            address = proxy.address
        await _lag_job_over_tls(spark, address, tls.ca, tmp_path / "cp")


async def _lag_job_over_tls(spark: SparkSession, address: str, ca: Path, checkpoint: Path) -> None:
    run = uuid.uuid4().hex[:6]
    samples, lag = f"samples-{run}", f"lag-{run}"
    cfg = Config.model_validate(
        {
            "kafka": {
                "bootstrap_servers": address,
                "security_protocol": "SSL",
                "ssl_cafile": str(ca),
            },
            "lag": {"source": "topic", "topic": lag, "samples_topic": samples},
            "groups": [{"name": "g"}],
            "pipeline": {"trigger_interval": 0.3, "shuffle_partitions": 2},
        }
    )
    context = ssl.create_default_context(cafile=str(ca))
    secure = {
        "bootstrap_servers": address,
        "security_protocol": "SSL",
        "ssl_context": context,
    }
    admin = AIOKafkaAdminClient(**secure)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(samples, 1, 1), NewTopic(lag, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(**secure)
    await producer.start()
    try:
        now = time.time()
        for i, (committed, end) in enumerate([(0, 50), (40, 90)]):
            s = OffsetSample(group="g", topic="t", partition=0, committed=committed,
                             log_end=end, sampled_at=now + i)  # fmt: skip
            await producer.send_and_wait(samples, s.encode(), key=partition_key("g", "t", 0))
    finally:
        await producer.stop()
    query = lagjob.start(spark, cfg, checkpoint=str(checkpoint))
    try:
        await asyncio.to_thread(query.processAllAvailable)
    finally:
        query.stop()
    assert query.exception() is None
    records = await lag_rows(lag, **secure)
    assert records[-1] is not None
    assert (records[-1]["group"], records[-1]["partition"], records[-1]["lag"]) == ("g", 0, 50)
    # The advertised listener speaks only TLS: a plaintext client cannot even bootstrap.
    plain = AIOKafkaConsumer(bootstrap_servers=address, request_timeout_ms=5000)
    with pytest.raises(KafkaConnectionError):
        await plain.start()
    await plain.stop()
