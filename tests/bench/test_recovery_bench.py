"""``misa bench recovery``: the phase split and the table from known timestamps, the kill of a whole process
group, and one real kill and restart of a small Q18 job (1,000 keys, DFS on a local folder, misa mode)."""

import json
import os
import subprocess
import threading
import time

import pytest

from bench.processes import group_members, kill
from bench.recovery import (
    PHASES,
    RECOVERY_STEPS,
    Series,
    executor_phases,
    line,
    markdown,
    phases,
    wait_read,
)
from misa.cli.main import main
from tests.bench.test_live_stats import source_log


def _events(runtime: bool) -> dict[str, list[dict]]:
    """A restarted process's probe events: Python at 12, the session at 20, (the runtime's claim at 20.5, its
    reconcile 21..24.5 with the load of version 7 in it: restore 21.5..23.5, then RocksDB open until 24.5)."""
    events = {"python": [{"at": 12.0}], "session": [{"start": 13.0, "end": 20.0}]}
    if runtime:
        events |= {
            "claim": [{"start": 20.5, "end": 20.7}],
            "reconcile": [{"start": 21.0, "end": 24.5, "version": 7}],
            "load": [{"start": 20.2, "end": 20.3, "version": -1}, {"start": 21.5, "end": 24.5, "version": 7}],
            "restore": [{"start": 21.5, "end": 23.5, "source": "dfs"}],
        }
    else:
        load = {"customMetrics": {"rocksdbLoadLatencyMs": 1500}}
        events["progress"] = [{"batch_id": 8, "progress": {"stateOperators": [load, load]}}]
    return events


def test_phases_follow_each_other_from_the_kill_to_the_end_of_the_first_batch():
    record = {"batch_id": 8, "started": 26.0, "latency_s": 4.0, "state_keys": 1000}
    row = phases(killed=10.0, spawned=10.5, events=_events(runtime=True), record=record)
    assert row["total_s"] == 20.0 and sum(row[p] for p in PHASES) == pytest.approx(row["total_s"])
    assert [row[p] for p in PHASES] == pytest.approx([0.5, 1.5, 8.0, 4.0, 2.0, 4.0])
    # reconcile: the recovery but the load (claim, versions, checks); open: the load but the restore
    assert [row[s] for s in RECOVERY_STEPS] == pytest.approx([1.0, 2.0, 1.0])
    assert row["restored_from"] == "dfs" and row["state_load_sum_s"] is None

    native = phases(killed=10.0, spawned=10.5, events=_events(runtime=False), record=record)
    assert native["recovery_s"] == 0.0 and native["query_start_s"] == 6.0
    assert native["state_load_sum_s"] == 3.0  # Spark's load time, summed over the state partitions


def test_an_executor_kill_splits_into_the_runtimes_recovery_in_place_the_rest_until_the_trigger_and_the_batch():
    """No process restarts after an executor kill: the driver's phases are None and the rest adds up."""
    record = {"batch_id": 8, "started": 26.0, "latency_s": 4.0, "state_keys": 1000}
    events = {k: v for k, v in _events(runtime=True).items() if k not in ("python", "session")}
    events["hosts"] = [{"start": 13.0, "end": 19.5, "pids": [7, 8]}]  # the failure seen at 13, new hosts until 19.5
    row = executor_phases(killed=10.0, events=events, record=record)
    assert row["total_s"] == 20.0 and row["restart_s"] is row["jvm_s"] is row["session_s"] is None
    assert (row["recovery_s"], row["query_start_s"], row["first_batch_s"]) == pytest.approx((4.0, 12.0, 4.0))
    assert (row["detect_s"], row["hosts_s"]) == pytest.approx((3.0, 6.5))
    assert row["restored_from"] == "dfs"
    native = executor_phases(killed=10.0, events=_events(runtime=False), record=record)
    assert native["recovery_s"] == 0.0 and native["query_start_s"] == 16.0 and native["state_load_sum_s"] == 3.0
    assert native["detect_s"] is native["hosts_s"] is None
    row |= {"target": "local", "mode": "misa", "case": "executor", "run": 1, "keys": 1000, "warm_batch_s": 1.0}
    assert line(row).endswith("20.00 s (recovery 4.00, query_start 12.00, first_batch 4.00)")
    assert "| local | executor | misa | 1 | 20.00 |" in markdown([row])
    assert "| 12.00 | 3.00 | 6.50 | 4.00 |" in markdown([row])  # query start, failure seen, new hosts, first batch


def test_the_table_has_a_median_per_cell_with_the_ratio_to_native_and_a_row_per_cycle():
    def row(mode: str, run: int, total: float) -> dict:
        split = dict.fromkeys((*PHASES, *RECOVERY_STEPS), total / 10)
        return {"target": "local", "case": "new", "mode": mode, "run": run, "keys": 1000, "total_s": total, **split}

    rows = [row("misa", 1, 10.0), row("misa", 2, 12.0), row("misa", 3, 30.0)]
    rows += [row("native", 1, 20.0), row("native", 2, 24.0), row("native", 3, 15.0)]
    lines = markdown(rows).splitlines()
    assert lines[2].startswith("| local | new | misa | 3 | 12.00 | 10.00 - 30.00 | 0.60 |")  # medians 12 and 20
    assert lines[3].startswith("| local | new | native | 3 | 20.00 | 15.00 - 24.00 | - |")
    assert len(lines) == 4 + 3 + len(rows)
    assert lines[7].startswith("| local | new | misa | 1 | 1,000 | 10.00 | 0.50 |")  # against native's run 1
    assert lines[9].startswith("| local | new | misa | 3 | 1,000 | 30.00 | 2.00 |")


def test_kill_leaves_no_process_of_the_group():
    process = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(group_members(process.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(group_members(process.pid)) == 3
    killed = kill(process)
    assert killed <= time.time() and group_members(process.pid) == [] and process.returncode == -9


@pytest.mark.slow  # three spark-submits (~45 s): on demand, so the default suite stays under 10 minutes
def test_a_killed_job_is_restarted_on_a_new_machine_and_every_phase_is_timed(tmp_path):
    """One real cycle: build 1,000 keys of Q18 state, SIGKILL the job, wipe its local state, restart it from the
    DFS copy (a local folder), time the first batch after the restart, then a warm batch."""
    work = tmp_path / "work"
    args = ["bench", "recovery", "--modes", "misa", "--cases", "new", "--repeats", "1", "--build-events", "5000",
            "--batch-events", "1000", "--files-per-batch", "5", "--settle", "0", "--timeout", "120", "--trigger", "1s",
            "--work", str(work), "--conf", "spark.sql.shuffle.partitions=2"]  # fmt: skip
    assert main(args) == 0
    [row] = [json.loads(line) for line in (work / "recovery.jsonl").read_text().splitlines()]
    assert row["mode"] == "misa" and row["case"] == "new" and 900 <= row["keys"] <= 1200
    assert row["restored_from"] == "dfs"  # the local state was gone
    assert all(row[p] > 0 for p in (*PHASES, *RECOVERY_STEPS, "warm_batch_s")), row
    assert sum(row[p] for p in PHASES) == pytest.approx(row["total_s"])
    assert not os.path.exists(work / "runs" / "local-misa" / "trash")
    assert "| local | new | misa | 1 |" in (work / "recovery.md").read_text()


@pytest.mark.slow  # a local cluster of two executors, two spark-submits (~2 min): on demand
@pytest.mark.parametrize("mode", ["misa", "native"])
def test_an_executor_killed_under_a_job_on_a_local_cluster_is_timed_to_the_first_batch_after_it(tmp_path, mode):
    """One real cycle per mode: build Q18's state (for misa in two state hosts on the executors), SIGKILL an executor
    JVM, time the first batch after it (misa's job restarts its query in place), then a warm batch."""
    work = tmp_path / "work"
    args = ["bench", "recovery", "--modes", mode, "--cases", "executor", "--repeats", "1", "--build-events", "5000",
            "--batch-events", "1000", "--files-per-batch", "5", "--settle", "0", "--timeout", "300", "--trigger", "1s",
            "--master", "local-cluster[2,2,1024]", "--work", str(work), "--conf", "spark.sql.shuffle.partitions=2",
            "--conf", "spark.misa.state.placement=executors", "--conf", "spark.misa.state.processes=2"]  # fmt: skip
    assert main(args) == 0
    [row] = [json.loads(line) for line in (work / "recovery.jsonl").read_text().splitlines()]
    assert row["case"] == "executor" and row["total_s"] > 0 and row["warm_batch_s"] > 0
    if mode == "misa":  # the executor of a state host was killed: the job recovered every partition in place
        assert row["recovery_s"] > 0 and row["open_s"] > 0, row
    log = (work / "runs" / f"local-{mode}" / "run-1.log").read_text()
    assert ("calling start() again" in log) == (mode == "misa")


def test_a_batch_of_a_partitioned_state_is_durable_once_every_partition_has_its_marker(tmp_path):
    """With the state in key partitions (worker processes, state hosts) the markers are per partition."""
    from bench.recovery import Series
    from checkpoint.manifest import marker_path

    series = Series("misa", "local", tmp_path / "folder", tmp_path / "work")
    (series.checkpoint / "commits").mkdir(parents=True)
    (series.checkpoint / "commits" / "3").write_text("v1\n{}")
    (series.dfs).mkdir(parents=True)
    (series.dfs / "partitions.json").write_text('{"partitions": 2}')
    for i in range(2):
        (series.dfs / f"partition-{i}" / marker_path(3)).parent.mkdir(parents=True, exist_ok=True)
    (series.dfs / "partition-0" / marker_path(3)).write_text("{}")
    assert not series.durable(3)
    (series.dfs / "partition-1" / marker_path(3)).write_text("{}")
    assert series.durable(3) and not series.durable(4)


def test_the_executor_case_needs_a_local_cluster(tmp_path):
    with pytest.raises(SystemExit, match="local-cluster"):
        main(["bench", "recovery", "--cases", "executor", "--work", str(tmp_path)])


def test_a_batch_that_ended_before_its_file_log_was_mirrored_is_still_found(tmp_path):
    """The runtime mirrors Spark's log to the checkpoint location after the batch has ended (and written its
    metrics): a wait that saw the end first must still look at the log when the mirror lands, with no batch after."""
    series = Series("misa", "local", tmp_path / "target", tmp_path / "work")
    series.work.mkdir(parents=True)
    series.metrics.write_text(
        "".join(json.dumps({"batch_id": b, "started": 1.0, "latency_s": 1.0}) + "\n" for b in (0, 1))
    )
    source_log(series.checkpoint, {0: ["a.json"]})

    def mirror_later() -> None:
        time.sleep(0.5)
        (series.checkpoint / "sources" / "0" / "1").write_text(
            "v1\n" + json.dumps({"path": "file:///in/b.json", "timestamp": 0, "batchId": 1})
        )

    series.process = subprocess.Popen(["sleep", "30"])
    (series.work / "run-0.log").write_text("the job's log\n")
    mirror = threading.Thread(target=mirror_later)
    mirror.start()
    try:
        assert wait_read(["b.json"], series, timeout_s=5.0) == 1
    finally:
        mirror.join()
        series.process.kill()
        series.process.wait()
