"""Shared fixtures: small configurations, a file:// DFS, an S3 server on loopback (moto) and a Kafka broker."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from common import failpoints
from misa.config import MisaConfig
from services.s3_server import start_s3_server

# Every Spark the tests start (the session below, spark-submit jobs and local-cluster executors, which inherit the
# environment) binds to loopback, never to the machine's other addresses.
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


@pytest.fixture(autouse=True)
def _no_failpoints() -> Iterator[None]:
    """Every test starts and ends with no failpoint enabled."""
    failpoints.configure("")
    yield
    failpoints.configure("")


@pytest.fixture(autouse=True)
def _one_process_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """``spark.misa.state.processes=auto`` means one process in every test, whatever this machine's cores (tests of
    worker processes ask for them)."""
    monkeypatch.setattr("misa.parallel.layout.auto_processes", lambda config: 1)


@pytest.fixture
def config() -> MisaConfig:
    """Small shards and fast retries, so that tests run quickly."""
    return MisaConfig.from_mapping(
        {
            "spark.misa.state.shards": "3",
            "spark.misa.state.retainVersions": "3",
            "spark.misa.state.writeChunkSize": "100",
            "spark.misa.checkpoint.retry.maxAttempts": "3",
            "spark.misa.checkpoint.retry.initialBackoff": "10ms",
            "spark.misa.checkpoint.retry.maxBackoff": "50ms",
            "spark.misa.checkpoint.retry.jitter": "5ms",
            "spark.misa.rocksdb.writeBufferSize": "1m",
        }
    )


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 API server (moto's server mode) on loopback, with credentials in the environment."""
    server, env = start_s3_server()
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    yield env["AWS_ENDPOINT_URL"]
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """The project's Kafka broker (KRaft, on loopback) for the whole test session: its bootstrap servers. Its jars are
    resolved first if missing (`make test` has done it)."""
    from services.kafka_broker import KafkaBroker
    from services.kafka_install import install_broker_jars

    install_broker_jars()
    with KafkaBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def s3_url(s3_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A fresh bucket per test."""
    import boto3

    bucket = f"misa-{abs(hash(request.node.nodeid)) % 10**10}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    return f"s3://{bucket}/query"


@pytest.fixture(params=["file", "s3"])
def dfs_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The DFS under test: a file:// directory or a bucket on the loopback S3 server."""
    if request.param == "file":
        return f"file://{tmp_path / 'dfs'}"
    return request.getfixturevalue("s3_url")


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test session."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need this venv (pyarrow)
    from services.kafka_install import connector_jars

    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", ",".join(connector_jars()))  # Spark's Kafka connector (make kafka-jars)
        .appName("misa-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def session_conf(spark):
    """Set spark.misa.* keys in the session for one test (the jobs read them at start)."""
    keys: list[str] = []

    def set_conf(values: dict[str, str]) -> None:
        for key, value in values.items():
            spark.conf.set(key, value)
            keys.append(key)

    yield set_conf
    for key in keys:
        spark.conf.unset(key)
