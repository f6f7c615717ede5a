"""What the jobs share: the native modes' state store configuration."""

from pathlib import Path

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
        pytest.param(
            {"spark.misa.checkpoint.dfsUrl": "gs://bucket/x"}, "pip install 'misa-pyspark[gcs]'", marks=pytest.mark.slow
        ),
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


@pytest.mark.slow  # about 40 s: a spark-submit job runs two batches before Ctrl-C, then again to its end
def test_ctrl_c_stops_a_running_job_in_one_line_naming_its_last_durable_version(tmp_path):
    import re
    import subprocess

    from job_helpers import ctrl_c_after, job_args, metrics, spark_submit_command

    from jobs import cluster_monitoring
    from jobs.gen.cm import generate_cm

    generate_cm(tmp_path / "in", rate=100, seconds=40, seed=3, files_per_second=0.25, jobs=50)
    args = [a for a in job_args("cm2", "misa", tmp_path / "in", tmp_path) if a != "--available-now"]
    log4j = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"  # as the README runs jobs
    conf = {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}"}
    cmd, env = spark_submit_command(cluster_monitoring, [*args, "--trigger", "1s"], conf=conf, master="local[1]")
    returncode, printed = ctrl_c_after(cmd, env, tmp_path / "metrics.jsonl", batches=2)
    assert returncode == 130, printed[-3000:]
    # Spark may log a warning or an error of the planning it interrupted, but no traceback
    assert "Traceback" not in printed and "py4j" not in printed.lower(), printed[-3000:]
    lines = [line for line in printed.splitlines() if "Ctrl-C" in line]
    assert lines == printed.strip().splitlines()[-1:], printed[-3000:]
    stopped = r"stopped by Ctrl-C; the state is durable up to version (\d+) \(batch \1\); restart resumes from there"
    assert len(lines) == 1 and (found := re.fullmatch(stopped, lines[0])), printed[-3000:]
    durable = int(found.group(1))
    markers = (tmp_path / "ckpt" / "misa-state" / "_commits").iterdir()
    assert durable >= 1 and durable == max(int(marker.name) for marker in markers)
    cmd, env = spark_submit_command(cluster_monitoring, job_args("cm2", "misa", tmp_path / "in", tmp_path))
    restarted = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    batches = [record["batch_id"] for record in metrics(tmp_path)]
    assert sorted(batches) == list(range(len(batches))) and len(batches) > durable + 1  # resumed after it
