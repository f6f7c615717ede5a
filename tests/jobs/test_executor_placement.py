"""The state on Spark's executors (``spark.misa.state.placement=executors``) on ``local-cluster[2,2,1024]``: two
executor JVMs of two cores each, the state's two key partitions in state hosts on them, against plain Spark.

Executor JVMs are SIGKILLed at each commit stage and a host is SIGSTOPped: no batch fails, the lost partition alone
moves to a new host that catches up, and the whole output must equal plain Spark's. These runs are of CM1, whose sum
changes when a batch is applied twice (CM2's average would not show it). A cluster without the hosts' task
slots is refused at start.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cm_helpers import KILL_QUERY, assert_same_output, late_cm2_input, native_cm_output
from job_helpers import executor_logs, job_args, spark_submit_command
from test_processes import WORKER_CHAIN

from common.failpoints import LOG_VAR
from jobs import cluster_monitoring
from jobs.gen.cm import generate_cm
from jobs.gen.parts import LateArrivals
from misa import Agg, MisaConfig, StatefulJob, register_state_sources
from misa.exceptions import ConfigError
from misa.operators.aggregation import Aggregation
from verify.output_diff import Output

CLUSTER = "local-cluster[2,2,1024]"
MISA = str(Path(sys.executable).parent / "misa")
# The worker processes' kill chain, but by its last point too few versions are left here for a host's second hit
# (a run with hit 2 finished), so that point is hit at the first version its run makes.
EXECUTOR_CHAIN = [*WORKER_CHAIN[:-1], (WORKER_CHAIN[-1][0], 1)]
ON_EXECUTORS = {"spark.misa.state.placement": "executors", "spark.misa.state.processes": "2"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return late_cm2_input(tmp_path_factory.mktemp("hosts-input"), seed=7)


@pytest.fixture(scope="module")
def expected(spark, data, tmp_path_factory) -> Output:
    """Plain Spark's output of the kill tests' query (:data:`KILL_QUERY`) over ``data``."""
    return native_cm_output(spark, data, tmp_path_factory.mktemp("hosts-native"), KILL_QUERY)


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """CM2's input of the kill tests cut to 2 batches (make test's case): late rows, windows closing."""
    folder = tmp_path_factory.mktemp("hosts-small")
    generate_cm(folder, rate=200, seconds=32, seed=7, files_per_second=0.125, jobs=200, late=LateArrivals(0.1, 12.0, 7))
    return folder


@dataclass
class Run:
    """A finished spark-submit: its exit code, the driver's output, and the executors' stderr with what failpoints
    said (an executor's stderr dies with it)."""

    returncode: int
    logs: str
    executors: str


def on_cluster(
    data: Path,
    run_dir: Path,
    failpoints: str = "",
    conf: dict[str, str] | None = None,
    *extra: str,
    cluster: str = CLUSTER,
    mode: str = "misa",
    query: str = KILL_QUERY,
) -> Run:
    """CM ``query`` in ``mode`` submitted to a local cluster, its state on the executors (``extra``: more job
    arguments)."""
    conf = {**ON_EXECUTORS, **(conf or {})}
    cmd, env = spark_submit_command(
        cluster_monitoring, [*job_args(query, mode, data, run_dir), *extra], failpoints, conf, cluster
    )
    told = run_dir / "failpoints.log"
    told.unlink(missing_ok=True)
    done = subprocess.run(cmd, capture_output=True, text=True, env={**env, LOG_VAR: str(told)}, timeout=900)
    failpoints_told = told.read_text() if told.exists() else ""
    return Run(done.returncode, done.stdout + done.stderr, executor_logs(done.stderr) + failpoints_told)


@pytest.mark.slow  # the suite's time; make test compares the executors placement with Spark in test_one_stream_split
@pytest.mark.parametrize("api", ["operator", "from_query", "large batches"])
def test_cm2_with_its_state_on_two_executors_equals_plain_spark(spark, small, tmp_path, api):
    """The two hosts hold the state; with every batch counted as large, the deltas go from Spark's tasks to the
    hosts and the hosts write the sorted output file themselves (one host fetches the other's rows)."""
    expected = native_cm_output(spark, small, tmp_path / "native")
    large = {"spark.misa.state.hostDeltasDriverRows": "0", "spark.misa.state.hostOutputDriverRows": "0"}
    conf = large if api == "large batches" else None
    done = on_cluster(small, tmp_path, "", conf, *(["--from-query"] if api == "from_query" else []), query="cm2")
    assert done.returncode == 0, done.logs[-3000:]
    assert_same_output(tmp_path, expected)
    state = tmp_path / "ckpt" / "misa-state"
    assert (state / "partitions.json").read_text() == '{"partitions": 2}'
    assert all(any((state / f"partition-{i}").iterdir()) for i in range(2))  # both hosts made versions durable
    verified = subprocess.run(
        [MISA, "ckpt", "verify", str(tmp_path / "ckpt"), "--deep"], capture_output=True, text=True
    )
    assert verified.returncode == 0 and verified.stdout.count("verified") == 2, verified.stdout + verified.stderr
    assert "[state host 0] serving partition 0" in done.executors
    assert "[state host 1] serving partition 1" in done.executors
    register_state_sources(spark)  # this session ran no misa job: one call registers the readers
    rows = spark.read.format("misa-state").load(str(tmp_path / "ckpt")).collect()  # written by the hosts
    assert {r.partition_id for r in rows} == {0, 1}
    assert len({(r.key.window, r.key.job_id) for r in rows}) == len(rows) > 0


@pytest.mark.timeout(60)  # not the 3 minutes of spark.misa.state.hostStartTimeout: local mode never grows
def test_a_session_without_the_hosts_task_slots_is_refused_at_start(spark, tmp_path):
    """local[2] has two task slots: two hosts would leave none for the query's tasks. No executor joins a local-mode
    session later, so the refusal comes at once, with the way out."""
    config = MisaConfig.from_mapping(ON_EXECUTORS)
    operator = Aggregation(["k"], [Agg("n", "count", "x")])
    with pytest.raises(ConfigError, match=r"needs 2 task slot\(s\) for the state hosts .* local\[2\] offers 2") as e:
        StatefulJob(operator, lambda i, t: None, str(tmp_path / "ckpt"), config=config)
    assert "spark.misa.state.placement=driver" in str(e.value) and "local-cluster" in str(e.value)


@pytest.mark.slow  # minutes of spark-submits on a local cluster: run on demand (-m slow)
@pytest.mark.timeout(5400)  # eight runs
@pytest.mark.parametrize("point,hit", EXECUTOR_CHAIN)
def test_an_executor_killed_at_a_commit_stage_fails_no_batch_and_the_output_equals_spark(
    data, expected, tmp_path, point, hit
):
    """The executor JVM of a state host is SIGKILLed at one commit stage: the query goes on (no restart), the lost
    partition moves to a new host, which catches up from its newest durable version; the output equals Spark's."""
    run = on_cluster(data, tmp_path, failpoints=f"{point}=killexecutor({hit})")
    assert f"failpoint {point}: killing executor JVM" in run.executors, (point, run.logs[-3000:])
    assert run.returncode == 0, (point, run.logs[-5000:])
    assert re.search(r"partition \d moved to grpc\+tcp://", run.logs), run.logs[-3000:]
    assert_same_output(tmp_path, expected)


@pytest.mark.slow  # minutes of spark-submits on a local cluster: run on demand (-m slow)
@pytest.mark.timeout(5400)
@pytest.mark.parametrize("point,hit", EXECUTOR_CHAIN)
def test_an_executor_killed_at_a_commit_stage_with_a_standby_per_partition_fails_no_batch(
    data, expected, tmp_path, point, hit
):
    """With one standby per partition (on the other executor: three slots each, for two hosts, two standbys and the
    query's tasks), an executor SIGKILLed at a commit stage (a host's or a standby's) loses no batch: a lost host's
    standby takes over (no load from the DFS), a lost standby is dropped and its task, run again, follows anew; the
    output equals Spark's."""
    standby = {"spark.misa.state.standbyReplicas": "1"}
    run = on_cluster(data, tmp_path, f"{point}=killexecutor({hit})", standby, cluster="local-cluster[2,3,1024]")
    assert f"failpoint {point}: killing executor JVM" in run.executors, (point, run.logs[-3000:])
    assert run.returncode == 0, (point, run.logs[-5000:])
    assert re.search(r"its standby .* takes over|standby of partition \d .* is dropped", run.logs), run.logs[-3000:]
    assert_same_output(tmp_path, expected)


@pytest.mark.slow  # minutes of spark-submits on a local cluster: run on demand (-m slow)
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("point", ["ckpt.after_dfs_marker", "gc.before_delete"])
def test_an_executor_killed_after_a_synchronous_commit_made_its_version_durable_applies_no_batch_twice(
    data, expected, tmp_path, point
):
    """In sync mode a host's commit request uploads the version and runs the GC. Killed after the version's marker
    (the batch is durable, its reply never came), the new host loads the version before it and redoes the batch, whose
    commit writes the same version again; loading the durable version would apply the batch twice (seed 64's soak,
    iteration 81: rows doubled and lost). The output equals Spark's."""
    run = on_cluster(data, tmp_path, f"{point}=killexecutor(2)", mode="sync")
    assert f"failpoint {point}: killing executor JVM" in run.executors, (point, run.logs[-3000:])
    assert run.returncode == 0, (point, run.logs[-5000:])
    assert re.search(r"partition \d moved to grpc\+tcp://", run.logs), run.logs[-3000:]
    assert_same_output(tmp_path, expected)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_stopped_host_moves_its_partition_within_the_liveness_timeout(data, expected, tmp_path):
    """A host SIGSTOPped in its commit (alive, not answering) is found within spark.misa.state.livenessTimeout: its
    task attempt is killed, Spark runs it again, and the new host takes the partition over; no batch fails and the
    output equals Spark's."""
    run = on_cluster(data, tmp_path, "ckpt.after_flush=stop(3)", {"spark.misa.state.livenessTimeout": "5s"})
    stopped = re.search(r"failpoint ckpt.after_flush: stopping process (\d+) at ([\d.]+)", run.executors)
    assert stopped, run.logs[-3000:]
    pid = int(stopped.group(1))
    try:
        assert run.returncode == 0, run.logs[-5000:]
        named = rf"state host of partition \d \(executor [^,]+, pid {pid}, .*did not answer a liveness"
        assert re.search(named, run.logs), run.logs[-3000:]
        moved = re.search(r"partition \d moved to \S+ \(pid \d+\) in ([\d.]+) s", run.logs)
        assert moved and float(moved.group(1)) < 60, run.logs[-3000:]
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert_same_output(tmp_path, expected)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_decommissioned_executor_fails_no_batch(data, expected, tmp_path):
    """With spark.decommission.enabled (a node drain, a spot reclaim), the executor of a state host is decommissioned
    in its host's commit (SIGPWR): Spark gives it no more tasks and, after the force-kill timeout, it leaves; its
    host's partition moves to a new host, no batch fails, and the output equals Spark's."""
    conf = {"spark.decommission.enabled": "true", "spark.executor.decommission.forceKillTimeout": "5s"}
    run = on_cluster(data, tmp_path, "ckpt.after_flush=decommission(3)", conf)
    assert "failpoint ckpt.after_flush: decommissioning executor JVM" in run.executors, run.logs[-3000:]
    assert run.returncode == 0, run.logs[-5000:]
    assert re.search(r"(?i)decommission", run.logs.split("failpoint ckpt.after_flush", 1)[-1]), run.logs[-3000:]
    assert re.search(r"partition \d moved to grpc\+tcp://", run.logs), run.logs[-3000:]
    assert_same_output(tmp_path, expected)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three runs
def test_a_checkpoint_moves_between_the_placements(data, expected, tmp_path):
    """Two worker processes of the driver, then two hosts on the executors, then the driver again, each run stopped
    by a kill after some batches: the same partitions, restored from their DFS copies, give Spark's output."""
    driver = {"spark.misa.state.processes": "2"}
    first = spark_submit_command(
        cluster_monitoring, job_args(KILL_QUERY, "misa", data, tmp_path), "ckpt.after_dfs_marker=kill(3)", driver
    )
    assert subprocess.run(first[0], env=first[1], capture_output=True, timeout=600).returncode != 0
    moved = on_cluster(data, tmp_path, failpoints="mirror.after_copy=kill(6)")  # the driver, which mirrors the log
    assert moved.returncode != 0 and "failpoint mirror.after_copy: killing process" in moved.logs, moved.logs[-3000:]
    last = spark_submit_command(cluster_monitoring, job_args(KILL_QUERY, "misa", data, tmp_path), "", driver)
    done = subprocess.run(last[0], env=last[1], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_output(tmp_path, expected)


@pytest.mark.slow  # root (ip netns) and minutes: run on demand, docs/failure-injection.md
@pytest.mark.timeout(1200)
def test_a_host_cut_off_the_network_fails_over_to_its_standby_and_is_fenced_when_it_comes_back(
    data, expected, tmp_path
):
    """A standalone cluster of two workers, each in a network namespace of its own. A host stops in its upload, before
    its DFS marker (a ``stop`` failpoint), and its worker's link goes down: the driver finds it lost within
    spark.misa.state.livenessTimeout and the partition's standby (on the other worker) takes over. Then the link
    comes back and the old host goes on: its DFS marker is refused (its claim was superseded). The output equals
    Spark's."""
    from netns_cluster import DRIVER_IP, NetnsCluster

    liveness_s = 5
    told = tmp_path / "failpoints.log"
    conf = {
        **ON_EXECUTORS,
        "spark.misa.state.standbyReplicas": "1",
        "spark.misa.state.livenessTimeout": f"{liveness_s}s",
        "spark.driver.host": DRIVER_IP,
        "spark.driver.bindAddress": DRIVER_IP,
        "spark.executor.memory": "768m",
        "spark.executorEnv.MISA_FAILPOINTS_LOG": str(told),
    }
    cmd, env = spark_submit_command(
        cluster_monitoring, job_args(KILL_QUERY, "misa", data, tmp_path), "ckpt.after_manifest=stop(3)", conf, "MASTER"
    )
    for name in ("MISA_FAILPOINTS", "MISA_FAILPOINTS_ONCE", "PYSPARK_PYTHON"):  # a standalone executor's own env
        cmd[cmd.index("--master") + 2 : cmd.index("--master") + 2] = ["--conf", f"spark.executorEnv.{name}={env[name]}"]
    with NetnsCluster(workers=2, cores=3, memory_mb=1024, work=tmp_path / "cluster") as cluster:
        cmd[cmd.index("MASTER")] = cluster.master_url
        driver_log = tmp_path / "driver.log"
        with driver_log.open("w") as out:
            job = subprocess.Popen(cmd, env={**env, "SPARK_LOCAL_IP": DRIVER_IP}, stdout=out, stderr=subprocess.STDOUT)
        try:
            stopped = _wait_for_line(told, r"stopping process (\d+) at ([\d.]+)", job, 600)
            pid, stopped_at = int(stopped.group(1)), float(stopped.group(2))
            worker = cluster.worker_of(pid)
            cluster.cut(worker)
            took_over = _wait_for_line(driver_log, r"(\S+ \S+),\d+ WARNING .* its standby at \S+ takes over", job, 300)
            _wait_for_line(driver_log, r"partition \d moved to \S+ \(pid \d+\)", job, 120)  # its claim made
            cluster.heal(worker)
            os.kill(pid, signal.SIGCONT)
            assert job.wait(600) == 0, driver_log.read_text()[-5000:]
        finally:
            job.kill()
        executors = cluster.executor_logs()
    logs = driver_log.read_text()
    detected = datetime.strptime(took_over.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    assert detected - stopped_at <= liveness_s + 15, (detected - stopped_at, logs[-3000:])  # + the next request's wait
    assert "did not answer a liveness check within 5 s" in logs, logs[-3000:]
    assert "superseded" in executors and "stops before it writes a marker" in executors, executors[-3000:]
    assert_same_output(tmp_path, expected)


def _wait_for_line(path: Path, pattern: str, job: subprocess.Popen, timeout_s: float) -> re.Match:
    """The first match of ``pattern`` in the file at ``path`` once written (the job must still run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, path.read_text(errors="replace")) if path.exists() else None
        if found:
            return found
        assert job.poll() is None, f"the job ended before {pattern!r} was seen"
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not seen in {path} within {timeout_s:g} s")
