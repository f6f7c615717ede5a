"""Kill the driver (spark-submit in a subprocess) at each commit step, restart, compare with plain Spark.

The job runs CM2 in misa mode over a few batches; one restart chain kills each run at the next
commit step, so every restart also recovers from the kill before it. The last run, with the same
command, must end with exactly the reference's output, every row of every batch compared as a multiset: nothing
lost, nothing counted twice, no stale row written again.
"""

import shutil
from pathlib import Path

import pytest
from cm_helpers import assert_same_output, late_cm2_input, native_cm_output, spark_submit

from verify.output_diff import Output

# One restart chain over one input: each run is killed at the next point (its hit counted in that run;
# 2 shards, so per-shard points are hit twice per version), the run after it recovers and goes on.
CHAIN = [
    ("commit.after_apply", 1),
    ("ckpt.after_flush", 2),
    ("ckpt.after_local_checkpoint", 3),
    ("dfs.put", 12),
    ("ckpt.after_dfs_marker", 1),
]
DFS_DOWN = {"spark.misa.checkpoint.retry.maxAttempts": "2", "spark.misa.checkpoint.retry.initialBackoff": "10ms"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return late_cm2_input(tmp_path_factory.mktemp("fi-input"), seed=5)


@pytest.fixture(scope="module")
def expected(spark, data, tmp_path_factory) -> Output:
    return native_cm_output(spark, data, tmp_path_factory.mktemp("fi-native"))


@pytest.mark.slow  # minutes of spark-submits: run on demand (-m slow); the crash soak covers every point
def test_kills_at_every_commit_step_in_a_row_then_restart_is_exactly_once(data, expected, tmp_path):
    """The chain, then a DFS that stays down (a clear failure), then a run whose transient DFS errors
    are retried: the whole output equals the reference's."""
    for point, hit in CHAIN:
        killed = spark_submit("cm2", "misa", data, tmp_path, failpoints=f"{point}=kill({hit})")
        assert killed.returncode == 128 + 9, (point, killed.stderr[-3000:])  # spark-submit passes on the SIGKILL
        assert f"failpoint {point}: killing process" in killed.stdout, point  # the driver's stderr goes there
    down = spark_submit("cm2", "misa", data, tmp_path, failpoints="dfs.put=raise", conf=DFS_DOWN)
    assert down.returncode != 0
    logs = down.stdout + down.stderr
    assert "DfsUnavailableError" in logs and "failed after 2 attempts" in logs
    done = spark_submit("cm2", "misa", data, tmp_path, failpoints="dfs.put=raise(3)")  # transient errors too
    assert done.returncode == 0, done.stderr[-3000:]
    assert "retrying" in done.stdout  # the driver's log, which spark-submit forwards to its stdout
    assert_same_output(tmp_path, expected)


@pytest.mark.slow  # minutes of spark-submits: run on demand (-m slow); the crash soak covers every point
def test_kill_after_the_next_batch_was_planned_then_restart_replays_the_same_batches(data, expected, tmp_path):
    """Version 1's commit dies after Spark planned batch 2 (offsets/2 and the file source's log entry 2 exist).

    Recovery makes Spark replay batch 1; batch 2 must then read the same two files as in the reference,
    not those of source log entries 2 and 3 together. No failpoint marks the start of a batch, so the
    flush's sleep is what lets batch 2 be planned first; the test checks that it was.
    """
    killed = spark_submit(
        "cm2", "misa", data, tmp_path, failpoints="ckpt.before_flush=sleep(4000);ckpt.after_local_checkpoint=kill(3)"
    )
    assert killed.returncode == 128 + 9, killed.stderr[-3000:]
    spark_log = tmp_path / "ckpt" / "misa-local" / "spark-checkpoint"  # the local copy Spark writes
    assert (spark_log / "offsets" / "2").exists() and not (spark_log / "commits" / "2").exists()
    done = spark_submit("cm2", "misa", data, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_output(tmp_path, expected)


@pytest.mark.slow
def test_kills_while_sparks_log_is_mirrored_then_restarts_on_wiped_disks_are_exactly_once(data, expected, tmp_path):
    """Each run is killed while Spark's own checkpoint is mirrored to the checkpoint location, and the next
    starts as on a new machine (the local disk wiped: the working state and Spark's local copy), so it
    restores Spark's log from the mirror and the state from the DFS; the whole output equals the reference's."""
    local_disk = tmp_path / "ckpt" / "misa-local"
    for point, hit in (("mirror.put", 5), ("mirror.after_copy", 4), ("ckpt.after_dfs_marker", 3)):
        killed = spark_submit("cm2", "misa", data, tmp_path, failpoints=f"{point}=kill({hit})")
        assert killed.returncode == 128 + 9, (point, killed.stderr[-3000:])
        assert f"failpoint {point}: killing process" in killed.stdout, point
        shutil.rmtree(local_disk)
    done = spark_submit("cm2", "misa", data, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "restoring Spark's checkpoint from" in done.stdout
    assert_same_output(tmp_path, expected)


@pytest.mark.slow
def test_kills_at_each_step_of_recovery_in_a_row_then_restart_is_exactly_once(data, expected, tmp_path):
    """Batch 1's commit dies after Spark planned batch 2, so recovery has work at each of its steps
    (trim the file source's entry 2, remove offsets/2, remove commits/1); each restart is killed at
    the next step and the one after it picks up where it stopped."""
    killed = spark_submit(
        "cm2", "misa", data, tmp_path, failpoints="ckpt.before_flush=sleep(4000);ckpt.after_local_checkpoint=kill(3)"
    )
    assert killed.returncode == 128 + 9, killed.stderr[-3000:]
    for point in (
        "recovery.after_source_entry_trimmed",
        "recovery.after_offset_removed",
        "recovery.after_commit_removed",
    ):
        again = spark_submit("cm2", "misa", data, tmp_path, failpoints=f"{point}=kill(1)")
        assert again.returncode == 128 + 9, (point, again.stderr[-3000:])
        assert f"failpoint {point}: killing process" in again.stdout, point
    done = spark_submit("cm2", "misa", data, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_output(tmp_path, expected)
