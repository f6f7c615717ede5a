"""What the jobs share: the native modes' state store configuration."""

import pytest

from jobs.submit import ROCKSDB_PROVIDER, native_state_store_conf
from misa.config import MisaConfig

R = "spark.sql.streaming.stateStore.rocksdb."


def test_native_is_spark_tuned_as_its_docs_advise_with_the_runtimes_memory_budget():
    config = MisaConfig.from_mapping(
        {
            "spark.misa.state.shards": "4",
            "spark.misa.rocksdb.writeBufferSize": "32m",
            "spark.misa.rocksdb.maxWriteBufferNumber": "3",
            "spark.misa.rocksdb.blockCacheSize": "64m",
        }
    )
    conf = native_state_store_conf("native", config)
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf[R + "changelogCheckpointing.enabled"] == "true"
    assert conf["spark.sql.streaming.stateStore.checkpointFormatVersion"] == "2"
    assert conf[R + "trackTotalNumberOfRows"] == "false"
    assert conf[R + "boundedMemoryUsage"] == "true"
    assert conf[R + "maxMemoryUsageMB"] == str(64 + 4 * 3 * 32)  # block cache + every shard's write buffers
    assert (conf[R + "writeBufferSizeMB"], conf[R + "maxWriteBufferNumber"], conf[R + "blockCacheSizeMB"]) == (
        "32",
        "3",
        "64",
    )


def test_native_default_is_the_provider_alone():
    conf = native_state_store_conf("native-default", MisaConfig())
    assert conf == {"spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER}


def test_a_misspelled_setting_ends_a_spark_submit_job_with_one_line(tmp_path):
    """Checked before the session starts: no Spark log in front of it, no traceback after it."""
    from cm_helpers import spark_submit

    done = spark_submit("cm2", "misa", tmp_path / "no-input", tmp_path, conf={"spark.misa.state.shard": "4"})
    assert done.returncode == 2
    printed = done.stdout + done.stderr  # spark-submit forwards the Python driver's stderr to its stdout
    errors = [line for line in printed.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "spark.misa.state.shard;" in errors[0], printed[-2000:]
    assert "Traceback" not in printed and "SparkContext" not in printed, printed[-2000:]


@pytest.mark.parametrize(
    "conf,expected",
    [
        ({"spark.misa.state.shards": "abc"}, "spark.misa.state.shards='abc' is malformed"),
        ({"spark.misa.checkpoint.dfsUrl": "gs://bucket/x"}, "pip install 'misa-pyspark[gcs]'"),
    ],
)
def test_a_bad_setting_value_ends_a_spark_submit_job_with_one_line(tmp_path, conf, expected):
    """A bad value, and a DFS URL no installed file system serves, are found before the session starts too."""
    from cm_helpers import spark_submit

    done = spark_submit("cm2", "misa", tmp_path / "no-input", tmp_path, conf=conf)
    assert done.returncode == 2
    printed = done.stdout + done.stderr
    errors = [line for line in printed.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], printed[-2000:]
    assert "Traceback" not in printed and "SparkContext" not in printed, printed[-2000:]
