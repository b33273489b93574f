"""The lag job keeps its checkpoint in S3 (``s3a://``, hadoop-aws from Maven Central) on
an S3-compatible server on loopback (moto): ``ballast pipeline lag`` writes its offsets
and state there, is interrupted, and a new process reads on from where it stopped,
processing only what arrived since and keeping its state (the rate spans the restart)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from controller.tools import embedded
from tests.brokers import kafka_yaml
from tests.pipeline.test_pipeline_e2e import lag_rows, produce_samples, sample

pytest.importorskip("pyspark", reason="the pipeline extra is not installed")

pytestmark = pytest.mark.integration

BALLAST = Path(sys.executable).parent / "ballast"
BUCKET = "ballast-checkpoints"


def _objects(store: embedded.BrokerProcess, prefix: str) -> list[str]:
    url = f"http://127.0.0.1:{store.port}/{BUCKET}?list-type=2&prefix={prefix}"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read().decode()
    return [k.split("</Key>")[0] for k in body.split("<Key>")[1:]]


async def _lag_job_until(
    argv: list[str],
    env: dict[str, str],
    log: Path,
    done: Callable[[], Awaitable[bool]],
    timeout: float = 180,
) -> None:
    """Run the job until ``done()`` holds, then interrupt it as an operator would."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log.open("ab"), env=env)
    try:
        deadline = time.monotonic() + timeout
        while not await done():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            await asyncio.sleep(1)
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    assert code == 130, log.read_text()[-3000:]


async def test_a_restarted_lag_job_reads_on_from_its_s3_checkpoint(
    kafka: embedded.BrokerProcess, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    samples, lag = f"samples-{run}", f"lag-{run}"
    await embedded.create_topics(kafka.address, {samples: 1, lag: 1})
    with embedded.s3(tmp_path).start() as store:
        embedded.create_bucket(store, BUCKET)
        config = tmp_path / "ballast.yaml"
        config.write_text(
            f"kafka: {kafka_yaml(kafka)}\n"
            f"lag: {{source: topic, topic: {lag}, samples_topic: {samples}}}\n"
            "groups: [{name: g}]\n"
            "pipeline: {trigger_interval: 500ms, shuffle_partitions: 2,\n"
            f"  s3_endpoint: 'http://127.0.0.1:{store.port}', s3_path_style: true}}\n"
        )
        checkpoint = f"s3a://{BUCKET}/{run}"
        argv = [str(BALLAST), "pipeline", "lag", "--config", str(config)]
        argv += ["--checkpoint", checkpoint]
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "ballast",
            "AWS_SECRET_ACCESS_KEY": "ballast",
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        log = tmp_path / "lag-job.log"
        now = time.time()
        await produce_samples(kafka, samples, [sample("g", 0, 30, 50, now)])

        async def first() -> bool:  # a lag record, and its batch committed in S3
            committed = f"{run}/commits/0" in _objects(store, run)
            return committed and bool(await lag_rows(lag, bootstrap_servers=kafka.address))

        await _lag_job_until(argv, env, log, first)
        written = _objects(store, f"{run}/")
        assert f"{run}/offsets/0" in written, written
        assert any(k.startswith(f"{run}/state/") and k.endswith(".delta") for k in written)
        before = await lag_rows(lag, bootstrap_servers=kafka.address)

        await produce_samples(kafka, samples, [sample("g", 0, 380, 400, now + 30)])

        async def second() -> bool:
            grown = len(await lag_rows(lag, bootstrap_servers=kafka.address)) > len(before)
            return grown and f"{run}/commits/1" in _objects(store, run)

        await _lag_job_until(argv, env, log, second)
        assert f"{run}/commits/1" in _objects(store, f"{run}/")
    new = (await lag_rows(lag, bootstrap_servers=kafka.address))[len(before) :]
    assert len(new) == 1, new  # only the sample that arrived since: the offsets came back
    assert new[0] is not None
    # the state came back too: the rate spans the restart, 50 at t=0 to 400 at t=30
    assert new[0]["produce_rate"] == pytest.approx(350 / 30)
