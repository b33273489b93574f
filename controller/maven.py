"""Jars from Maven Central, fetched once into a cache: Apache Kafka for the tests and
``dev up``, Hadoop's S3A for the lag job's checkpoints. The cache is ``$BALLAST_CACHE``
(default ``~/.cache/ballast``); ``scripts/install-tools`` fills it for CI."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path


class JarsError(RuntimeError):
    """The jars are not cached and Maven could not fetch them."""


def cache_root() -> Path:
    return Path(os.environ.get("BALLAST_CACHE", "~/.cache/ballast")).expanduser()


def fetch(pom: Path, name: str, properties: Mapping[str, str]) -> Path:
    """The folder ``name`` of the cache holding the dependencies of ``pom`` (built with
    ``properties``), fetched with Maven the first time: whole or not at all."""
    target = cache_root() / name
    if (target / "COMPLETE").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError(f"{target} is empty and Maven (mvn) is not installed to fill it")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    argv = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies"]
    argv += [f"-D{k}={v}" for k, v in sorted(properties.items())]
    argv.append(f"-DoutputDirectory={partial}")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise JarsError(f"mvn could not fetch {name}:\n" + (done.stdout + done.stderr)[-2000:])
    (partial / "COMPLETE").write_text(f"{pom.name} {dict(properties)}\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target
