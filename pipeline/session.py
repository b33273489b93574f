"""SparkSession for the pipeline: loopback-only local mode unless spark-submit says
otherwise, the Kafka Python source registered, no console progress bar."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark import SparkConf
from pyspark.sql import SparkSession

from .kafka_source import KafkaDataSource

#: Options whose values Spark replaces with ``*********(redacted)`` in plans, ``explain``
#: and the UI: beside Spark's own (``spark.redaction.regex``: secret, password, token),
#: the native connector's JAAS line and inline key (``pipeline/connection.py``).
REDACTED_OPTIONS = r"(?i)url|password|secret|token|jaas|keystore\.key"


def session(
    master: str = "local[2]", shuffle_partitions: int = 4, extra: Mapping[str, str] | None = None
) -> SparkSession:
    """``extra``: more settings for the new session (the S3A jars and endpoint)."""
    # Python workers must be this interpreter (the venv with Ballast installed), and a
    # local driver binds to loopback only.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("ballast-pipeline")
    if not SparkConf().contains("spark.master"):  # spark-submit sets its own
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.master(master)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
        )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.redaction.options.regex", REDACTED_OPTIONS)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(KafkaDataSource)
    return spark
