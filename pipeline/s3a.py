"""An ``s3a://`` checkpoint for the lag job: Spark keeps its streaming state where pods
come and go. PySpark ships Hadoop's client but not ``hadoop-aws``; its jars come from
Maven Central once (``s3a.pom.xml``, the cache of ``controller.maven``), matching
the Hadoop PySpark carries. Credentials come from Hadoop's default chain (the AWS_*
environment variables, a web identity, the instance's role), never from Ballast's config.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyspark

from controller import maven
from controller.config import PipelineSettings

POM = Path(__file__).with_name("s3a.pom.xml")
#: The Hadoop version ``s3a.pom.xml`` names (its AWS SDK version follows it).
HADOOP = "3.5.0"


def wanted(checkpoint: str) -> bool:
    return checkpoint.startswith("s3a://")


def spark_hadoop_version() -> str:
    """The Hadoop client version inside the installed PySpark."""
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        found = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name)
        if found:
            return found.group(1)
    raise maven.JarsError(f"no hadoop-client-api jar in {jars}")


def jars() -> list[Path]:
    """hadoop-aws and the AWS SDK modules it uses, fetched on first use."""
    spark = spark_hadoop_version()
    if spark != HADOOP:
        raise maven.JarsError(
            f"PySpark carries Hadoop {spark}; pipeline/s3a.pom.xml names {HADOOP}: "
            "update it (and the AWS SDK version of that Hadoop release)"
        )
    return sorted(maven.fetch(POM, f"s3a-{HADOOP}", {}).glob("*.jar"))


def spark_conf(p: PipelineSettings) -> dict[str, str]:
    """What the session needs to read and write an ``s3a://`` checkpoint."""
    found = [str(j) for j in jars()]
    conf = {
        # On the driver's own classpath: Hadoop looks a filesystem class up through its
        # configuration's class loader, which ``spark.jars`` alone may not reach.
        "spark.driver.extraClassPath": ":".join(found),
        "spark.executor.extraClassPath": ":".join(found),
        "spark.jars": ",".join(found),
        "spark.hadoop.fs.s3a.endpoint.region": p.s3_region,
        "spark.hadoop.fs.s3a.path.style.access": str(p.s3_path_style).lower(),
    }
    if p.s3_endpoint is not None:
        conf["spark.hadoop.fs.s3a.endpoint"] = p.s3_endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            p.s3_endpoint.startswith("https://")
        ).lower()
    return conf


if __name__ == "__main__":  # python -m pipeline.s3a: fill the cache (scripts/install-tools)
    print(jars()[0].parent)
