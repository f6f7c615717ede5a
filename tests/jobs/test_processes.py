"""The state phase in two worker processes (``spark.misa.state.processes=2``) against plain Spark, and worker crashes.

The jobs run CM2 (sliding windows, late rows), LR2 (the interval self-join) and Q20 (the keyed join) with their
state split into two key partitions; every row of every batch must equal plain Spark's. Killing the workers at
each commit stage and while they restore (each run's worker dies, the batch fails, the next run recovers every
partition from the newest version all of them hold) must lose and double nothing.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
from cm_helpers import assert_same_output, late_cm2_input, native_cm_output, run_in_process, spark_submit
from job_helpers import job_args, spark_submit_command

from jobs import cluster_monitoring
from verify.output_diff import Output

TWO = {"spark.misa.state.processes": "2"}
# Worker kills at each commit stage, one run each (two shards per worker: per-shard points are hit twice a version).
WORKER_CHAIN = [
    ("commit.after_apply", 2),
    ("ckpt.after_flush", 2),
    ("ckpt.after_local_checkpoint", 3),
    ("ckpt.after_local_marker", 1),
    ("dfs.put", 9),
    ("ckpt.after_manifest", 1),
    ("ckpt.after_dfs_marker", 2),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return late_cm2_input(tmp_path_factory.mktemp("proc-input"), seed=7)


@pytest.fixture(scope="module")
def expected(spark, data, tmp_path_factory) -> Output:
    return native_cm_output(spark, data, tmp_path_factory.mktemp("proc-native"))


@pytest.fixture
def two_processes(spark):
    spark.conf.set("spark.misa.state.processes", "2")
    yield
    spark.conf.unset("spark.misa.state.processes")


@pytest.mark.slow  # make test runs two worker processes in test_differential.py (a join) and test_nexmark.py (Q20)
def test_cm2_in_two_worker_processes_equals_plain_spark(spark, data, expected, two_processes, tmp_path):
    run_in_process(spark, "cm2", "misa", data, tmp_path)
    assert_same_output(tmp_path, expected)
    state = tmp_path / "ckpt" / "misa-state"
    assert (state / "partitions.json").read_text() == '{"partitions": 2}'
    assert all(any((state / f"partition-{i}").glob("shard-*")) for i in range(2))  # both partitions hold state


@pytest.mark.slow  # minutes of spark-submits: run on demand (-m slow)
def test_worker_kills_at_every_commit_stage_then_restart_is_exactly_once(data, expected, tmp_path):
    """Each run's workers die at the next commit stage (the driver fails the batch and exits); the run after it
    recovers every partition from the newest version all of them hold; the whole output equals plain Spark's."""
    for point, hit in WORKER_CHAIN:
        failed = spark_submit("cm2", "misa", data, tmp_path, failpoints=f"{point}=kill({hit})", conf=TWO)
        logs = failed.stdout + failed.stderr
        assert failed.returncode not in (0, 128 + 9), (point, logs[-3000:])  # the driver lives, the batch fails
        assert f"failpoint {point}: killing process" in logs, point
        assert "StateWorkerError" in logs and "was killed by SIGKILL" in logs, (point, logs[-3000:])
    done = spark_submit("cm2", "misa", data, tmp_path, conf=TWO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_output(tmp_path, expected)


@pytest.mark.slow
def test_worker_kills_while_restoring_from_the_dfs_then_restart_is_exactly_once(data, expected, tmp_path):
    """A run stops after some batches; each next run starts on a wiped local disk, so its workers restore their
    partitions from the DFS, and are killed there (the start fails); the last run recovers and finishes."""
    first = spark_submit("cm2", "misa", data, tmp_path, failpoints="ckpt.after_dfs_marker=kill(3)", conf=TWO)
    assert first.returncode != 0
    local_disk = tmp_path / "ckpt" / "misa-local"
    for hit in (1, 3):
        shutil.rmtree(local_disk)
        restoring = spark_submit("cm2", "misa", data, tmp_path, failpoints=f"dfs.get=kill({hit})", conf=TWO)
        logs = restoring.stdout + restoring.stderr
        assert restoring.returncode not in (0, 128 + 9), logs[-3000:]
        assert "failpoint dfs.get: killing process" in logs
    shutil.rmtree(local_disk)
    done = spark_submit("cm2", "misa", data, tmp_path, conf=TWO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_output(tmp_path, expected)


@pytest.mark.slow
def test_start_called_again_after_a_failed_commit_starts_new_workers_and_finishes(data, expected, tmp_path):
    """The driver's mirror of Spark's log fails for good (DfsUnavailableError) in the first run's first commit; the
    job calls start() again in the same driver (--retry-start 1), which starts new workers and recovers them."""
    conf = {**TWO, "spark.misa.checkpoint.retry.maxAttempts": "3", "spark.misa.checkpoint.uploadThreads": "1"}
    args = [*job_args("cm2", "misa", data, tmp_path), "--retry-start", "1"]
    cmd, env = spark_submit_command(cluster_monitoring, args, "mirror.put=raise(3)", conf)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    logs = done.stdout + done.stderr
    assert done.returncode == 0, logs[-3000:]
    assert "DfsUnavailableError" in logs and "calling start() again" in logs
    assert_same_output(tmp_path, expected)
