"""``pipeline/submit.py`` is what the Helm chart's lag job hands to spark-submit (cluster
mode on Kubernetes). Here the same file runs under PySpark's own spark-submit, local
master, against the embedded broker: samples in, a lag record out."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from controller.tools import embedded
from controller.wire.records import OffsetSample, partition_key
from tests.brokers import kafka_yaml
from tests.pipeline.test_pipeline_e2e import lag_rows

pyspark = pytest.importorskip("pyspark", reason="the pipeline extra is not installed")

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"


async def test_spark_submit_runs_the_lag_job_from_its_main_file(
    kafka: embedded.BrokerProcess, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    samples, lag = f"samples-{run}", f"lag-{run}"
    await embedded.create_topics(kafka.address, {samples: 1, lag: 1})
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address)
    await producer.start()
    try:
        sample = OffsetSample(group="g", topic="t", partition=0, committed=5, log_end=25,
                              sampled_at=time.time())  # fmt: skip
        await producer.send_and_wait(samples, sample.encode(), key=partition_key("g", "t", 0))
    finally:
        await producer.stop()
    config = tmp_path / "ballast.yaml"
    config.write_text(
        f"kafka: {kafka_yaml(kafka)}\n"
        f"lag: {{source: topic, topic: {lag}, samples_topic: {samples}}}\n"
        "groups: [{name: g}]\n"
        "pipeline: {trigger_interval: 500ms, shuffle_partitions: 2}\n"
    )
    log = (tmp_path / "spark-submit.log").open("w")
    proc = subprocess.Popen(
        [
            str(SPARK_SUBMIT),
            "--master",
            "local[1]",
            str(ROOT / "pipeline" / "submit.py"),
            "--config",
            str(config),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        rows: list[dict[str, object] | None] = []
        while not rows:
            assert proc.poll() is None, (tmp_path / "spark-submit.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no lag record from the submitted job"
            await asyncio.sleep(1)
            rows = await lag_rows(lag, bootstrap_servers=kafka.address)
        assert rows[-1] is not None
        assert (rows[-1]["group"], rows[-1]["partition"], rows[-1]["lag"]) == ("g", 0, 20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
