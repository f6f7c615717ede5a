"""The crash soak (``misa soak``).

The fast tests cover the plan sampler, the runner's kills (with small real processes) and the
summary; the slow one runs three soak iterations of the jobs with spark-submit.
"""

import json
import os
import sys
import time

import pyarrow as pa
import pytest

from checkpoint import failpoints
from jobs import soak
from misa.cli import main as misa
from misa.io.sink import ParquetBatchSink


def draw(count: int, seed: int = 3) -> list[soak.Plan]:
    versions, clean_s = {"cm2": 5, "lr2": 5}, {"cm2": 20.0, "lr2": 30.0}
    return [
        soak.sample_plan(soak.iteration_rng(seed, i), list(soak.JOBS), soak.MODES, soak.DFS_KINDS, versions, clean_s)
        for i in range(count)
    ]


def test_plans_are_seeded_and_cover_every_failpoint_job_mode_and_dfs():
    plans = draw(3000)
    assert plans[:50] == draw(50) and plans[:50] != draw(50, seed=4)
    kills = [k for p in plans for k in p.kills]
    assert {k.point for k in kills if k.point} == set(failpoints.FAILPOINTS)
    assert {p.job for p in plans} == set(soak.JOBS) and {p.mode for p in plans} == set(soak.MODES)
    assert {p.dfs for p in plans} == set(soak.DFS_KINDS)
    assert 0.25 < sum(len(p.kills) == 2 for p in plans) / len(plans) < 0.35
    timed = [k for k in kills if not k.point]
    assert 0.2 < len(timed) / len(kills) < 0.3
    assert all(4.0 <= k.delay_s <= 30.0 for k in timed)
    assert all(1 <= k.hit <= soak.max_hits(k.point, 5) for k in kills if k.point)
    assert max(k.hit for k in kills if k.point == "dfs.put") == 4 * soak.SHARDS * 5
    for kill in kills:
        failpoints.parse(kill.failpoints)  # a valid MISA_FAILPOINTS value


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_failpoint_kill_is_seen_in_the_log(tmp_path):
    kill = soak.Kill("dfs.put", 2)
    code = "from checkpoint import failpoints\nfor _ in range(3): failpoints.hit('dfs.put')"
    attempt = soak.run_attempt(
        python(code), {"PYTHONPATH": str(soak.ROOT)}, tmp_path / "log", time.monotonic() + 60, kill
    )
    assert (attempt.fired, attempt.exit) == (True, -9)
    assert "failpoint dfs.put: killing process" in attempt.tail()
    missed = soak.run_attempt(
        python(code), {"PYTHONPATH": str(soak.ROOT)}, tmp_path / "log2", time.monotonic() + 60, soak.Kill("dfs.put", 4)
    )
    assert (missed.fired, missed.exit) == (False, 0)  # a no-kill run


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
    assert soak._failure(hung, final=True)[0] == "hang"


def assert_dead(pid: int) -> None:
    for _ in range(100):  # the kernel reaps an orphan shortly after its SIGKILL
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} survived the kill of its group")


def test_summary_counts_kills_lost_and_doubled_rows():
    records = [
        soak.Record(1, 0, "cm2", "misa", "s3", ["dfs.put#3"], kills=["dfs.put#3"]),
        soak.Record(
            2,
            0,
            "lr2",
            "sync",
            "file",
            ["after 3.0s"],
            kills=["after 3.0s"],
            result="mismatch",
            lost=2,
            extra=3,
            doubled=1,
        ),
        soak.Record(3, 0, "cm2", "misa", "file", ["recovery.before_rollback#1"], result="hang"),
    ]
    summary = soak.summarize(records)
    assert summary["kills_by_point"] == {"dfs.put": 1, "timed": 1}
    assert (summary["lost_rows"], summary["doubled_rows"], summary["hangs"], summary["failed"]) == (2, 1, 1, [2, 3])
    assert summary["no_kill_iterations"] == 1
    assert "MISMATCH: lost 2, extra 3 (doubled 1)" in records[1].line(3)


@pytest.mark.slow
def test_three_soak_iterations_equal_the_reference(tmp_path, capsys):
    out = tmp_path / "soak.jsonl"
    code = misa(["soak", "--iterations", "3", "--seed", "1", "--work", str(tmp_path), "--out", str(out)])
    printed = capsys.readouterr().out
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 4 and lines[-1]["summary"]["iterations"] == 3, printed
    assert code == 0 and lines[-1]["summary"]["failed"] == [], printed


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
