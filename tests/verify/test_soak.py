"""The crash soak (``misa soak``).

The fast tests cover the plan sampler and each scenario's stages, the runner's kills and failpoints
(with small real processes), refusals, damage to a DFS folder, the in-process retry of ``start()``
and the summary; the slow ones run soak iterations of the jobs with spark-submit, one per scenario.
"""

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from dataclasses import replace

import fsspec
import pyarrow as pa
import pytest

from checkpoint.exceptions import DfsUnavailableError
from common import failpoints
from jobs.submit import RETRY_MESSAGE, run_with_retries
from misa.cli import main as misa
from misa.io.sink import ParquetBatchSink
from verify import soak, soak_kafka

VERSIONS = {"cm2": 5, "lr2": 5, "q20": 5}
CLEAN = {"cm2": 20.0, "lr2": 30.0, "q20": 25.0}
CLEAN_S = {
    (job, placement): s * (2 if placement == "executors" else 1)
    for job, s in CLEAN.items()
    for placement in soak.PLACEMENTS
}
SHORTEST, LONGEST = min(CLEAN_S.values()), max(CLEAN_S.values())
SOURCES = soak_kafka.SOURCES


def draw(count: int, seed: int = 3, scenarios=soak.SCENARIOS, **options) -> list[soak.Plan]:
    """The plans of iterations 0 to ``count`` of ``seed`` (``options``: :func:`soak.sample_plan`'s other draws)."""
    return [
        soak.sample_plan(
            soak.iteration_rng(seed, i),
            list(soak.JOBS),
            soak.MODES,
            soak.DFS_KINDS,
            VERSIONS,
            CLEAN_S,
            scenarios,
            **options,
        )
        for i in range(count)
    ]


def test_plans_are_seeded_and_cover_every_failpoint_job_mode_dfs_and_scenario():
    plans = draw(5000)
    assert plans[:50] == draw(50) and plans[:50] != draw(50, seed=4)
    kills = [k for p in plans for k in p.kills]
    assert {k.point for k in kills if k.point} == set(failpoints.FAILPOINTS)
    assert {p.job for p in plans} == set(soak.JOBS) == {"cm2", "lr2", "q20"}
    assert {p.mode for p in plans} == set(soak.MODES) and {p.dfs for p in plans} == set(soak.DFS_KINDS)
    assert {p.scenario for p in plans} == set(soak.SCENARIOS)
    killed = [p for p in plans if p.scenario in ("kill", "moved", "damaged")]
    assert all(len(p.kills) in (1, 2) for p in killed)
    assert 0.25 < sum(len(p.kills) == 2 for p in killed) / len(killed) < 0.35
    whole = [k for p in plans if p.placement == "driver" for k in p.kills if not k.worker]
    timed = [k for k in kills if not k.point and not k.partial]
    assert 0.2 < sum(not k.point for k in whole) / len(whole) < 0.3
    assert all(0.2 * SHORTEST <= k.delay_s <= LONGEST for k in timed + [k for k in kills if k.partial])
    low, high = soak.WORKER_KILL_WINDOW
    assert all(low * SHORTEST - 0.05 <= k.delay_s <= high * LONGEST + 0.05 for k in kills if k.partial)
    assert all(1 <= k.hit <= soak.max_hits(k.point, 5) for k in kills if k.point)
    assert max(k.hit for k in kills if k.point == "dfs.put") == 4 * soak.SHARDS * 5
    for kill in kills:
        failpoints.parse(kill.failpoints)  # a valid MISA_FAILPOINTS value


def test_half_the_plans_read_kafka_and_drawing_the_source_changes_no_other_draw():
    both = draw(2000, sources=SOURCES)
    assert 0.45 < sum(p.source == "kafka" for p in both) / len(both) < 0.55
    assert [replace(p, source="files") for p in both] == draw(2000)  # a seed's files-only plans stay as they were
    assert {p.source for p in draw(200)} == {"files"}


def test_a_kafka_run_reads_the_jobs_topic_with_the_connector_on_the_class_path(tmp_path):
    s = soak.Soak(soak_args(tmp_path))
    s.topics = soak_kafka.SoakTopics()
    s.topics._broker = argparse.Namespace(bootstrap="127.0.0.1:9")  # the command line only: no broker needed
    s.topics._per_batch["q20"] = 123
    cmd = s.command("q20", "misa", tmp_path / "r", "file:///d", source="kafka")
    assert "--input" not in cmd and "--max-files-per-trigger" not in cmd
    assert cmd[cmd.index("--kafka") + 1 : cmd.index("--kafka") + 6] == [
        "127.0.0.1:9",
        "--topic",
        "soak-q20",
        "--max-offsets-per-trigger",
        "123",
    ]
    assert cmd[cmd.index("--output-topic") + 1] == soak_kafka.output_topic(tmp_path / "r")  # judged read_committed
    assert cmd.index("--jars") < cmd.index(str(soak.ROOT / "jobs" / "nexmark.py"))
    assert all(jar.endswith(".jar") for jar in cmd[cmd.index("--jars") + 1].split(","))


def test_a_kafka_batch_layout_is_the_offsets_each_batch_ended_at(tmp_path):
    offsets = tmp_path / "ckpt" / "offsets"
    offsets.mkdir(parents=True)
    ends = ['{"soak-q20":{"1":5,"0":4}}', '{"soak-q20":{"0":4,"1":5}}', '{"soak-q20":{"0":9,"1":5}}']
    for batch, end in enumerate(ends):
        # the topic read twice (a self-join, as Spark plans LR2), and misa's own source
        lines = f"{end}\n{end}\n" if batch == 2 else f"{end}\n"
        (offsets / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{lines}{{"misaNoDataBatchAfter":{batch}}}\n')
    (offsets / ".0.crc").write_text("")
    layout = soak.batch_layout(tmp_path / "ckpt", "kafka")
    # batch 1 read nothing new (a batch without data); key order and misa's own sources do not matter
    assert layout == {0: ('{"soak-q20": {"0": 4, "1": 5}}',), 2: ('{"soak-q20": {"0": 9, "1": 5}}',)}


def test_half_the_plans_run_two_state_workers_and_only_those_kill_a_worker():
    plans = [p for p in draw(6000) if p.placement == "driver"]
    assert 0.45 < sum(p.processes == 2 for p in plans) / len(plans) < 0.55
    assert all(not k.worker for p in plans if p.processes == 1 for k in p.kills)
    kills = [k for p in plans if p.processes == 2 for k in p.kills]
    assert 0.25 < sum(k.worker for k in kills) / len(kills) < 0.35
    assert all(k.failpoints == "" and str(k).startswith("a worker after") for k in kills if k.worker)
    assert not any(k.executor or k.action == "killexecutor" for p in plans for k in p.kills)


def test_half_the_plans_put_the_state_on_the_executors_and_only_those_kill_an_executor():
    plans = [p for p in draw(6000) if p.placement == "executors"]
    assert 0.45 < len(plans) / 6000 < 0.55
    kills = [k for p in plans for k in p.kills]
    executor = [k for k in kills if k.executor or k.action == "killexecutor"]
    assert 0.45 < len(executor) / len(kills) < 0.55 and not any(k.worker for k in kills)
    assert 0.2 < sum(k.executor for k in executor) / len(executor) < 0.3  # a random moment, else a host's failpoint
    at_points = {k.point for k in executor if k.point}
    assert at_points == set(failpoints.FAILPOINTS) - set(soak.DRIVER_POINTS)
    assert all(k.failpoints.endswith(f"=killexecutor({k.hit})") for k in executor if k.point)
    assert all(k.failpoints == "" and str(k).startswith("an executor after") for k in executor if k.executor)
    assert {p.processes for p in plans} == {1, 2}


def test_half_the_executor_plans_keep_a_standby_replica_and_drawing_it_changes_no_other_draw():
    drawn = draw(4000, standby_replicas=soak.STANDBY_REPLICAS)
    on_executors = [p for p in drawn if p.on_executors]
    assert 0.45 < sum(p.standby_replicas == 1 for p in on_executors) / len(on_executors) < 0.55
    assert not any(p.standby_replicas for p in drawn if not p.on_executors)  # standbys need executors
    assert [replace(p, standby_replicas=0) for p in drawn] == draw(4000)


def test_each_scenario_draws_its_own_parts():
    plans = draw(3000)
    by = {name: [p for p in plans if p.scenario == name] for name in soak.SCENARIOS}
    assert all(p.damage is None and p.retry is None and p.standby_s == 0 for p in by["kill"] + by["moved"])
    assert {p.damage.kind for p in by["damaged"]} == set(soak.DAMAGE_KINDS)
    assert len({p.damage.seed for p in by["damaged"]}) == len(by["damaged"])
    in_driver = [p for p in by["retry"] if p.processes == 1 and p.placement == "driver"]
    assert {p.retry for p in in_driver} == set(soak.RETRY_POINTS)
    assert {p.retry for p in by["retry"] if p not in in_driver} == set(soak.WORKER_RETRY_POINTS)
    assert 0.4 < sum(len(p.kills) == 1 for p in by["retry"]) / len(by["retry"]) < 0.6
    assert all(len(p.kills) <= 1 and p.damage is None for p in by["retry"])
    assert all(not p.kills and p.damage is None and p.retry is None for p in by["standby"])
    low, high = soak.STANDBY_START
    assert all(
        low * CLEAN_S[p.job, p.placement] - 0.05 <= p.standby_s <= high * CLEAN_S[p.job, p.placement] + 0.05
        for p in by["standby"]
    )
    assert {p.scenario for p in draw(200, scenarios=["kill"])} == {"kill"}


CONF = soak.CONF
KILL = soak.Kill("dfs.put", 3)


def runs(stages):
    return [run for stage in stages if isinstance(stage, tuple) for run in stage]


def test_kill_and_moved_stages_restart_after_each_kill_moved_ones_on_a_new_state_dir():
    kills = (KILL, soak.Kill(delay_s=4.0))
    plain = soak.stages(soak.Plan("cm2", "misa", "file", kills, "kill"), CONF)
    assert [len(stage) for stage in plain] == [1, 1, 1]
    assert [(r.kill, r.state_dir, r.final) for r in runs(plain)] == [
        (KILL, None, False),
        (kills[1], None, False),
        (None, None, True),
    ]
    moved = runs(soak.stages(soak.Plan("cm2", "misa", "file", kills, "moved"), CONF))
    assert [r.state_dir for r in moved] == ["state-1", "state-2", "state-3"]
    assert soak.describe(plain) == ["kill dfs.put#3", "kill after 4.0s"]


def test_damaged_stages_damage_the_dfs_before_the_final_run():
    damage = soak.Damage("flip", 7)
    stages = soak.stages(soak.Plan("cm2", "misa", "file", (KILL,), "damaged", damage=damage), CONF)
    assert stages[1] == damage and runs(stages)[-1].final and runs(stages)[-1].state_dir is None
    assert soak.describe(stages) == ["kill dfs.put#3", "flip a DFS file"]


def test_retry_stage_fails_the_first_start_once_and_allows_one_retry():
    stages = soak.stages(soak.Plan("lr2", "sync", "s3", (), "retry", retry="commit.after_apply"), CONF)
    (final,) = runs(stages)
    assert final.final and final.retry_start == 1
    assert (final.failpoints, dict(final.conf)) == (
        "commit.after_apply=raise(1)",
        {"spark.misa.commit.maxRestarts": "0"},
    )
    put = soak.retry_failure("dfs.put", {**CONF, "spark.misa.checkpoint.retry.maxAttempts": "4"})
    assert put == ("dfs.put=raise(4)", {"spark.misa.checkpoint.uploadThreads": "1"})  # one file, every attempt
    for spec in (final.failpoints, put[0]):
        failpoints.parse(spec)


def test_standby_stage_runs_two_drivers_on_their_own_state_dirs_then_a_clean_run():
    stages = soak.stages(soak.Plan("q20", "misa", "file", (), "standby", standby_s=6.5), CONF)
    (first, second), (final,) = stages
    assert (first.state_dir, second.state_dir, final.state_dir) == ("state-a", "state-b", "state-b")
    assert (first.delay_s, second.delay_s) == (0.0, 6.5)
    assert first.failpoints == second.failpoints == f"commit.after_apply=sleep({soak.STANDBY_SLOW_MS})"
    assert first.may_refuse == second.may_refuse == soak.STANDBY_REFUSALS and not final.may_refuse
    assert final.final and not final.failpoints


def soak_args(tmp_path, **values) -> argparse.Namespace:
    defaults = dict(
        work=tmp_path,
        seed=0,
        conf=[],
        cds=False,
        dfs=["file"],
        iteration_timeout=60.0,
        keep_runs=False,
        sources=["files"],
    )
    return argparse.Namespace(**{**defaults, **values})


def test_command_passes_the_run_state_dir_conf_and_retries(tmp_path):
    s = soak.Soak(soak_args(tmp_path, conf=["spark.misa.commit.maxRestarts=5"]))
    s.inputs["q20"] = tmp_path / "input"
    plain = s.command("q20", "misa", tmp_path / "r", "file:///d")
    assert "--state-dir" not in plain and "--retry-start" not in plain
    assert "spark.misa.commit.maxRestarts=5" in plain and plain[plain.index("--query") + 1] == "q20"
    run = soak.Run("x", state_dir="state-b", conf=(("spark.misa.commit.maxRestarts", "0"),), retry_start=1)
    cmd = s.command("q20", "misa", tmp_path / "r", "file:///d", run)
    assert cmd[cmd.index("--state-dir") + 1] == str(tmp_path / "r" / "state-b")
    assert cmd[cmd.index("--retry-start") + 1] == "1"
    assert "spark.misa.commit.maxRestarts=0" in cmd and "spark.misa.commit.maxRestarts=5" not in cmd
    assert plain[plain.index("--master") + 1] == "local[2]" and "spark.misa.state.placement=driver" in plain
    hosts = s.command("q20", "misa", tmp_path / "r", "file:///d", run, processes=2, placement="executors")
    assert hosts[hosts.index("--master") + 1] == "local-cluster[2,2,1024]"
    assert {"spark.misa.state.placement=executors", "spark.misa.state.processes=2"} <= set(hosts)
    assert not any("standbyReplicas" in part for part in hosts)
    standby = s.command("q20", "misa", tmp_path / "r", "file:///d", run, 2, "executors", standby_replicas=1)
    assert "spark.misa.state.standbyReplicas=1" in standby
    # two hosts and their standbys take four slots, the query's tasks one more: three slots an executor
    assert standby[standby.index("--master") + 1] == "local-cluster[2,3,1024]"
    one = s.command("q20", "misa", tmp_path / "r", "file:///d", run, 1, "executors", standby_replicas=1)
    assert one[one.index("--master") + 1] == "local-cluster[2,2,1024]"


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_failpoint_kill_is_seen_in_the_log(tmp_path):
    kill = soak.Kill("dfs.put", 2)
    code = "from common import failpoints\nfor _ in range(3): failpoints.hit('dfs.put')"
    attempt = soak.run_attempt(
        python(code), {"PYTHONPATH": str(soak.ROOT)}, tmp_path / "log", time.monotonic() + 60, kill
    )
    assert (attempt.fired, attempt.exit) == (True, -9)
    assert "failpoint dfs.put: killing process" in attempt.tail()
    missed = soak.run_attempt(
        python(code), {"PYTHONPATH": str(soak.ROOT)}, tmp_path / "log2", time.monotonic() + 60, soak.Kill("dfs.put", 4)
    )
    assert (missed.fired, missed.exit) == (False, 0)  # a no-kill run


def test_run_failpoints_are_set_beside_the_kill(tmp_path):
    code = f"import os; print('spec=' + os.environ[{failpoints.ENV_VAR!r}])"
    attempt = soak.run_attempt(
        python(code), {}, tmp_path / "log", time.monotonic() + 60, soak.Kill("dfs.put", 4), "dfs.get=raise(1)"
    )
    assert "spec=dfs.put=kill(4);dfs.get=raise(1)" in attempt.text()
    alone = soak.run_attempt(python(code), {}, tmp_path / "log2", time.monotonic() + 60, None, "dfs.get=raise(1)")
    assert "spec=dfs.get=raise(1)" in alone.text() and not alone.retried


def test_a_host_failpoint_kill_is_seen_in_the_failpoints_log(tmp_path):
    """A state host's stderr is its executor's: the runner reads what failpoints did from the file it names."""
    code = "import sys\nfrom common import failpoints\nsys.stderr = open('/dev/null', 'w')\nfailpoints.hit('dfs.put')"
    kill = soak.Kill("dfs.put", 1)
    attempt = soak.run_attempt(
        python(code), {"PYTHONPATH": str(soak.ROOT)}, tmp_path / "log", time.monotonic() + 60, kill
    )
    assert (attempt.fired, attempt.exit) == (True, -9) and "killing process" not in attempt.text()


def test_an_executor_kill_takes_one_executor_and_lets_the_driver_end_by_itself(tmp_path):
    """The kill finds an executor JVM by its main class in the run's process group, and waits for the driver, which
    must finish: a query that fails after losing an executor is an error (its hosts' partitions must move)."""
    pid_file = tmp_path / "executor.pid"
    code = (
        "import subprocess, sys, time\n"
        "sleep = [sys.executable, '-c', 'import time; time.sleep(60)', 'CoarseGrainedExecutorBackend']\n"
        "child = subprocess.Popen(sleep)\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "child.wait(); sys.exit(3)"
    )
    kill = soak.Kill(delay_s=1.0, executor=True)
    attempt = soak.run_attempt(python(code), {}, tmp_path / "log", time.monotonic() + 60, kill)
    assert (attempt.fired, attempt.exit, attempt.label) == (True, 3, "an executor after 1.0s")
    assert_dead(int(pid_file.read_text()))
    result, detail = soak.outcome(soak.Run(str(kill), kill), attempt, None)
    assert result == "error" and "must move its hosts' partitions, not fail the query" in detail
    finished = soak.Attempt(attempt.label, True, 0, attempt.seconds, attempt.log)
    assert soak.outcome(soak.Run(str(kill), kill), finished, None) is None
    assert soak.kill_kind(attempt.label) == "timed executor"
    assert soak.kill_kind("dfs.put#2 (executor)") == "dfs.put (executor)" and soak.kill_kind("after 3s") == "timed"


@pytest.mark.slow  # the suite's time
def test_timed_kill_and_hang_kill_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(60)"
    )
    timed = soak.run_attempt(python(code), {}, tmp_path / "log", time.monotonic() + 60, soak.Kill(delay_s=1.0))
    assert (timed.fired, timed.exit) == (True, -9) and timed.seconds < 10
    assert_dead(int(pid_file.read_text()))
    hung = soak.run_attempt(python(code), {}, tmp_path / "log2", time.monotonic() + 1.0, None)
    assert (hung.fired, hung.exit) == (False, None)
    assert_dead(int(pid_file.read_text()))
    assert soak.outcome(soak.Run("final", final=True), hung, None)[0] == "hang"


def assert_dead(pid: int) -> None:
    for _ in range(100):  # the kernel reaps an orphan shortly after its SIGKILL
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} survived the kill of its group")


SUPERSEDED = (
    "misa.exceptions.CommitFailedError: the commit of version 2 failed in its apply stage: OwnershipError: "
    "this driver (epoch 1) was superseded by vm:7 (epoch 2): another driver took over this checkpoint. Fix it."
)
DAMAGED_FILE = "shard-1/sst/000009-0123456789abcdef.sst"
CORRUPT = (
    "checkpoint.exceptions.CorruptCheckpointError: file:///d/shard-1/sst/000009-0123456789abcdef.sst of version 3 is "
    "damaged: 10 bytes. Restore an older version (misa ckpt list file:///d)."
)


def finished(tmp_path, text: str, exit: int | None = 1, fired: bool = False) -> soak.Attempt:
    log = tmp_path / f"log-{abs(hash(text))}"
    log.write_text(f"some line\nTraceback (most recent call last):\n  raise RecoveryError(message)\n{text}\n")
    return soak.Attempt("-", fired, exit, 1.0, log)


def test_refusal_is_the_innermost_named_error_of_the_last_such_line(tmp_path):
    assert soak.refusal(SUPERSEDED).startswith("OwnershipError: this driver (epoch 1) was superseded")
    assert soak.refusal(f"{CORRUPT}\nValueError: other") == f"CorruptCheckpointError: {CORRUPT.split(': ', 1)[1]}"
    assert soak.refusal("  raise RecoveryError(batch_gap_message(...))\nValueError: x") is None
    spark = (
        "pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query [id = 9f04] terminated "
        "with exception: Multiple streaming queries are concurrently using file:/r/ckpt/sources/0. SQLSTATE: XXKST"
    )
    user = "Traceback (most recent call last):\nerror: Spark runs batch 3 but the state is at version 1. Stop it."
    assert soak.refusal(user) == "UserError: Spark runs batch 3 but the state is at version 1. Stop it."
    assert soak.refusal("  raise OSError('error: no')") is None  # only a line of its own
    assert soak.refusal(spark) == (
        "ConcurrentModificationException: Multiple streaming queries are concurrently using "
        "file:/r/ckpt/sources/0. SQLSTATE: XXKST"
    )
    log_race = (  # two drivers wrote offsets/0 at once (a standby started 2.5 s after the first, found by the soak)
        "StreamingQueryException: [STREAM_FAILED] Query q20-misa [id = dfef] terminated with exception: "
        "[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming jobs detected for 0. SQLSTATE"
    )
    assert soak.refusal(log_race) == (
        "ConcurrentModificationException: Multiple streaming jobs detected for 0. SQLSTATE"
    )
    assert soak.damaged_names(DAMAGED_FILE) == ("000009-0123456789abcdef.sst", "000009.sst")
    assert soak.damaged_names("shard-0/meta/MANIFEST-000005-0123456789abcdef") == (
        "MANIFEST-000005-0123456789abcdef",
        "MANIFEST-000005",
    )


def test_outcome_accepts_clear_refusals_only_where_the_scenario_allows(tmp_path):
    standby = soak.Run("driver A", may_refuse=soak.STANDBY_REFUSALS)
    final = soak.Run("final", final=True)
    superseded = finished(tmp_path, SUPERSEDED)
    assert soak.outcome(standby, superseded, None) is None
    assert soak.outcome(final, superseded, None)[0] == "error"
    assert soak.outcome(standby, finished(tmp_path, "ValueError: bug"), None)[0] == "error"
    assert soak.outcome(final, finished(tmp_path, "", exit=0), None) is None
    assert soak.outcome(final, finished(tmp_path, "", exit=-9, fired=True), None) is None
    corrupt = finished(tmp_path, CORRUPT)
    assert soak.outcome(final, corrupt, DAMAGED_FILE) == ("refused", soak.refusal(CORRUPT))
    result, detail = soak.outcome(final, corrupt, "shard-0/sst/000011-0123456789abcdef.sst")  # another file
    assert result == "error" and soak.refusal(CORRUPT) in detail
    vague = finished(tmp_path, "checkpoint.exceptions.CorruptCheckpointError: shard-1/sst/000009.sst is damaged")
    assert soak.outcome(final, vague, DAMAGED_FILE)[0] == "error"  # no fix named


def test_damage_flips_one_byte_of_or_deletes_a_file_of_the_dfs(tmp_path):
    root = tmp_path / "dfs"
    files = {f"shard-{s}/{kind}/{n}": os.urandom(64) for s in (0, 1) for kind in ("sst", "meta") for n in ("a", "b")}
    untouched = {"_commits/3": b"{}", "shard-0/manifest/3.json": b"{}", "_owner.json": b"{}"}
    for relative, data in {**files, **untouched}.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    fs, path = fsspec.core.url_to_fs(f"file://{root}")
    flipped, done = soak.damage_dfs(fs, path, soak.Damage("flip", 1))
    assert flipped in files and done.startswith("flipped byte ") and done.endswith(f" of {flipped}")
    changed = (root / flipped).read_bytes()
    assert len(changed) == 64 and sum(a != b for a, b in zip(changed, files[flipped])) == 1
    assert all((root / r).read_bytes() == data for r, data in {**files, **untouched}.items() if r != flipped)
    assert soak.damage_dfs(fs, path, soak.Damage("flip", 1)) == (flipped, done)  # seeded: the same byte, flipped back
    assert (root / flipped).read_bytes() == files[flipped]
    deleted, done = soak.damage_dfs(fs, path, soak.Damage("delete", 2))
    assert deleted in files and not (root / deleted).exists() and done == f"deleted {deleted}"
    assert all((root / r).exists() for r in set(files) - {deleted})
    empty = tmp_path / "empty"
    empty.mkdir()
    assert soak.damage_dfs(*fsspec.core.url_to_fs(f"file://{empty}"), soak.Damage("delete", 2)) is None
    (empty / "shard-0" / "meta").mkdir(parents=True)
    (empty / "shard-0" / "meta" / "000004.log").write_bytes(b"")  # no byte to flip: deleted
    done = soak.damage_dfs(*fsspec.core.url_to_fs(f"file://{empty}"), soak.Damage("flip", 2))
    assert done == ("shard-0/meta/000004.log", "deleted shard-0/meta/000004.log")


def test_run_with_retries_calls_start_again_after_a_failure_at_most_n_times(caplog):
    class Query:
        def __init__(self, fails: bool):
            self.fails = fails

        def awaitTermination(self):
            if self.fails:
                raise RuntimeError("query failed")

    outcomes = iter([True, False])
    starts = Counter()

    def start():
        starts["n"] += 1
        return Query(next(outcomes))

    with caplog.at_level(logging.ERROR, logger="jobs.submit"):
        run_with_retries(start, 1)
    assert starts["n"] == 2 and RETRY_MESSAGE in caplog.text and "query failed" in caplog.text

    def start_fails():
        starts["n"] += 1
        raise OSError("start failed")

    starts.clear()
    with pytest.raises(OSError, match="start failed"):
        run_with_retries(start_fails, 2)
    assert starts["n"] == 3
    starts.clear()
    with pytest.raises(OSError):
        run_with_retries(start_fails, 0)
    assert starts["n"] == 1
    settled = iter([OSError("last commit failed"), None])  # the query ends well, its last commit fails once

    def settle():
        error = next(settled)
        if error:
            raise error

    starts.clear()
    run_with_retries(lambda: starts.update(["n"]) or Query(False), 1, settle)
    assert starts["n"] == 2


def test_a_failure_of_the_last_mirror_of_sparks_log_after_the_query_ended_starts_the_query_again():
    """Soak seed 45, iteration 71: the DFS failed while the job mirrored Spark's last log entries after its query
    had ended (in its close), outside ``--retry-start``'s reach, and the job exited with the error. Settling (the
    last commits and that mirror) now fails the run the retries cover: the query starts again, then settles."""
    from types import SimpleNamespace

    from jobs.submit import run_started

    class Job:
        config = SimpleNamespace(python_switch_interval_s=0.005)
        batch_running = None
        mirrors = 0

        def settle(self) -> None:
            self.mirrors += 1
            if self.mirrors == 1:
                raise DfsUnavailableError("mirror of commits/4 failed after 3 attempts")

        def close(self, spark: object) -> None:
            self.settle()

    class Query:
        def awaitTermination(self) -> None:
            pass

    job, starts = Job(), Counter()
    args = SimpleNamespace(retry_start=1)
    run_started(SimpleNamespace(_jvm=None), job, lambda: starts.update(["n"]) or Query(), args)
    assert starts["n"] == 2 and job.mirrors == 3  # settled after each start, then once more in close


def test_summary_counts_kills_lost_and_doubled_rows_and_refusals_per_scenario():
    records = [
        soak.Record(1, 0, "cm2", "misa", "s3", ["kill dfs.put#3"], kills=["dfs.put#3"]),
        soak.Record(
            2,
            0,
            "lr2",
            "sync",
            "file",
            ["kill after 3.0s"],
            kills=["after 3.0s"],
            result="mismatch",
            lost=2,
            extra=3,
            doubled=1,
        ),
        soak.Record(3, 0, "cm2", "misa", "file", ["kill recovery.before_rollback#1"], result="hang"),
        soak.Record(4, 0, "q20", "misa", "file", ["driver A & driver B after 3.0s"], "standby", refusals=["A: x"]),
        soak.Record(5, 0, "q20", "misa", "file", ["flip a DFS file"], "damaged", result="refused", damage="flipped"),
        soak.Record(6, 0, "cm2", "misa", "file", ["retry x"], "retry", retried=True, result="dfs-damaged"),
    ]
    summary = soak.summarize(records)
    assert summary["kills_by_point"] == {"dfs.put": 1, "timed": 1}
    assert (summary["lost_rows"], summary["doubled_rows"], summary["hangs"]) == (2, 1, 1)
    assert summary["failed"] == [2, 3, 6]  # a clear refusal of a damaged DFS is no failure
    assert summary["no_kill_iterations"] == 4 and summary["retried_starts"] == 1
    assert summary["by_scenario"] == {
        "damaged": {"refused": 1},
        "kill": {"ok": 1, "mismatch": 1, "hang": 1},
        "retry": {"dfs-damaged": 1},
        "standby": {"ok": 1},
    }
    assert summary["refusals"] == ["4 (standby) A: x"]
    assert summary["by_placement"] == {"driver": {"ok": 2, "mismatch": 1, "hang": 1, "refused": 1, "dfs-damaged": 1}}
    text = soak.summary_text(summary)
    assert "  standby: 1 ok" in text and "  4 (standby) A: x" in text and "retried starts: 1" in text
    assert "MISMATCH: lost 2, extra 3 (doubled 1)" in records[1].line(3)
    assert "standby" in records[3].line(6) and "1 refusal(s)" in records[3].line(6)


@pytest.mark.slow
def test_three_soak_iterations_equal_the_reference(tmp_path, capsys):
    out = tmp_path / "soak.jsonl"
    code = misa(["soak", "--iterations", "3", "--seed", "1", "--work", str(tmp_path), "--out", str(out)])
    printed = capsys.readouterr().out
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 4 and lines[-1]["summary"]["iterations"] == 3, printed
    assert code == 0 and lines[-1]["summary"]["failed"] == [], printed


@pytest.mark.slow
def test_one_iteration_of_each_new_scenario_equals_the_reference(tmp_path):
    """CM2 on a file:// DFS in misa mode, at the soak's smallest input: standby, moved, damaged and retry."""
    plans = [
        soak.Plan("cm2", "misa", "file", (), "standby", standby_s=4.0),
        soak.Plan("cm2", "misa", "file", (soak.Kill("ckpt.after_dfs_marker", 3),), "moved"),
        soak.Plan("cm2", "misa", "file", (soak.Kill("ckpt.after_dfs_marker", 2),), "damaged", soak.Damage("delete", 7)),
        soak.Plan("cm2", "misa", "file", (), "retry", retry="commit.after_apply"),
    ]
    with soak.Soak(soak_args(tmp_path, iteration_timeout=400.0)) as s:
        s.prepare("cm2")
        records = [s.iteration(i, plan) for i, plan in enumerate(plans, 1)]
    details = "\n".join(f"{r.line(4)}\n{r.detail}" for r in records)
    assert [r.result for r in records] == ["ok"] * 4, details
    assert records[2].damage.startswith("deleted shard-") and records[3].retried, details
    assert all(len(r.attempts) == n for r, n in zip(records, (3, 2, 2, 1))), details


def fake_run(run_dir, log_offsets, rows_by_batch):
    """A run's folder as Spark and the sink leave it: offsets and file-source logs (two files per entry), output."""
    (run_dir / "ckpt" / "offsets").mkdir(parents=True)
    (run_dir / "ckpt" / "sources" / "0").mkdir(parents=True)
    for entry in range(max(log_offsets) + 1):
        lines = [
            json.dumps({"path": f"file:///in/part-{2 * entry + i:08d}.json", "timestamp": 0, "batchId": entry})
            for i in range(2)
        ]
        (run_dir / "ckpt" / "sources" / "0" / str(entry)).write_text("\n".join(["v1", *lines]))
    for batch, offset in enumerate(log_offsets):
        offsets = f'v1\n{{"batchWatermarkMs":0}}\n{{"logOffset":{offset}}}'
        (run_dir / "ckpt" / "offsets" / str(batch)).write_text(offsets)
    sink = ParquetBatchSink(run_dir / "out")
    for batch, rows in enumerate(rows_by_batch):
        sink(
            batch,
            pa.table(
                {"vid": [r[0] for r in rows], "spd": [r[1] for r in rows]},
                schema=pa.schema([("vid", pa.int64()), ("spd", pa.float64())]),
            ),
        )
    return run_dir


def test_batch_layout_lists_the_files_each_batch_read(tmp_path):
    run = fake_run(tmp_path, [0, 1, 3, 3], [[], [], [], []])  # batch 2 read two log entries, batch 3 nothing
    assert soak.batch_layout(run / "ckpt") == {
        0: ("part-00000000.json", "part-00000001.json"),
        1: ("part-00000002.json", "part-00000003.json"),
        2: tuple(f"part-{i:08d}.json" for i in range(4, 8)),
    }


def test_judge_tells_relayout_from_lost_rows(tmp_path):
    append = soak.SoakJob("linear_road.py", "lr2", lambda *a, **k: {}, None)
    rows = [[(1, 0.5)], [(2, 0.5)], [(3, 0.5)]]
    reference = soak.Reference.of(append, fake_run(tmp_path / "ref", [0, 1, 2], rows))
    assert soak.judge(append, reference, fake_run(tmp_path / "same", [0, 1, 2], rows))[0] == "ok"
    merged = fake_run(tmp_path / "merged", [0, 2], [rows[0], rows[1] + rows[2]])
    result, diff, detail = soak.judge(append, reference, merged)
    assert (result, diff.ok) == ("relayout", True)
    assert "batch 1 read part-00000002.json, part-00000003.json, part-00000004.json, part-00000005.json" in detail
    lost = fake_run(tmp_path / "lost", [0, 2], [rows[0], rows[1]])
    result, diff, _ = soak.judge(append, reference, lost)
    assert (result, diff.lost, diff.extra_rows) == ("mismatch", 1, 0)
    doubled = fake_run(tmp_path / "doubled", [0, 1, 2], [rows[0], rows[1] * 2, rows[2]])
    result, diff, _ = soak.judge(append, reference, doubled)
    assert (result, diff.doubled) == ("mismatch", 1)
    update = soak.SoakJob("cluster_monitoring.py", "cm2", lambda *a, **k: {}, ("vid",))
    stale = fake_run(tmp_path / "stale", [0, 2], [rows[0], rows[1] + rows[2] + [(1, 0.7)]])  # key 1 updated again
    result, diff, _ = soak.judge(update, soak.Reference.of(update, tmp_path / "ref"), stale)
    assert (result, diff.lost, diff.extra_rows) == ("mismatch", 1, 1)


def test_run_with_retries_raises_a_user_error_at_once():
    """A retry cannot fix the query's definition or its configuration: it would fail the same way."""
    from misa.exceptions import IncompatibleStateError

    starts = Counter()

    def start():
        starts["n"] += 1
        raise IncompatibleStateError("aggregations changed")

    with pytest.raises(IncompatibleStateError):
        run_with_retries(start, 3)
    assert starts["n"] == 1


def test_only_reruns_the_chosen_iterations_with_their_plans():
    parser = argparse.ArgumentParser()
    soak.add_parser(parser.add_subparsers())
    args = parser.parse_args(["soak", "--seed", "3", "--only", "4,2"])
    fake = argparse.Namespace(versions=VERSIONS, clean_s=CLEAN_S)
    chosen = list(soak.iterations(args, fake))
    assert [index for index, _ in chosen] == [4, 2]
    drawn = draw(5, sources=SOURCES, standby_replicas=soak.STANDBY_REPLICAS)
    assert [plan for _, plan in chosen] == [drawn[4], drawn[2]]
