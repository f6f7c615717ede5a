"""The Cluster Monitoring generator (``jobs.gen.cm``) and ``misa gen cm``; no Spark needed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from jobs.gen.cm import COLUMNS, JOB_ID_BASE, generate_cm
from misa.cli import main as misa

INT, NULLABLE_INT, FLOAT = (int,), (int, type(None)), (float,)
TYPES = {
    "time": INT,
    "missing_info": NULLABLE_INT,
    "job_id": INT,
    "task_index": INT,
    "machine_id": NULLABLE_INT,
    "event_type": INT,
    "user": (str,),
    "scheduling_class": INT,
    "priority": INT,
    "cpu_request": FLOAT,
    "memory_request": FLOAT,
    "disk_request": FLOAT,
    "different_machines": NULLABLE_INT,
}


def parts(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.json"))


def read(folder: Path) -> list[dict]:
    return [json.loads(line) for path in parts(folder) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def minute(tmp_path_factory) -> tuple[Path, dict, list[dict]]:
    """60 s at 1000 records/s, two files per second."""
    folder = tmp_path_factory.mktemp("cm")
    stats = generate_cm(
        folder, rate=1000, seconds=60, seed=3, files_per_second=2, start_time_us=5_000_000, progress=False
    )
    return folder, stats, read(folder)


def test_every_record_has_the_task_event_columns_and_types(minute):
    _, stats, rows = minute
    assert len(rows) == stats["records"] > 0
    for row in rows:
        assert tuple(row) == COLUMNS
        for column, types in TYPES.items():
            value = row[column]
            assert type(value) in types, (column, value)  # type(): a bool is no int here
        assert 0 <= row["event_type"] <= 8 and 0 <= row["scheduling_class"] <= 3 and 0 <= row["priority"] <= 11
        assert 0.0 <= row["cpu_request"] <= 1.0 and row["memory_request"] >= 0 and row["disk_request"] >= 0
        assert row["different_machines"] in (None, 0, 1) and row["job_id"] >= JOB_ID_BASE
        assert round(row["cpu_request"], 6) == row["cpu_request"]


def test_value_distributions(minute):
    rows = minute[2]
    n = len(rows)
    assert 0.35 < sum(r["event_type"] == 1 for r in rows) / n < 0.45  # SCHEDULE is the common event
    assert len({r["event_type"] for r in rows}) == 9
    assert sum(r["missing_info"] is None for r in rows) / n > 0.9
    assert 0 < sum(r["machine_id"] is None for r in rows) < n / 2
    assert 50 <= len({r["user"] for r in rows}) <= 100 and all(4 <= len(r["user"]) <= 16 for r in rows)
    jobs = Counter(r["job_id"] for r in rows).most_common()
    assert jobs[-1][0] < JOB_ID_BASE + 10_000  # the default pool
    top = sum(count for _, count in jobs[:100])  # 1 % of the pool gets a large share: hot jobs
    assert top / n > 0.15 and jobs[0][1] > 10 * n / 10_000


def test_event_time_order_within_and_across_files(minute):
    folder, stats, rows = minute
    times = [r["time"] for r in rows]
    assert times == sorted(times)
    assert stats["first_time_us"] == times[0] >= 5_000_000 and stats["last_time_us"] == times[-1] < 65_000_000
    for index, path in enumerate(parts(folder)):  # file i covers [i / F, (i + 1) / F) s after the start
        file_times = [json.loads(line)["time"] for line in path.read_text().splitlines()]
        assert file_times and all(
            5_000_000 + index * 500_000 <= t < 5_000_000 + (index + 1) * 500_000 for t in file_times
        )


def test_records_per_second_are_around_the_rate(minute):
    rows = minute[2]
    per_second = np.bincount([(r["time"] - 5_000_000) // 1_000_000 for r in rows], minlength=60)
    assert len(per_second) == 60
    assert abs(per_second.mean() - 1000) < 50
    assert 40 < per_second.std() < 200  # normal with std ~ 10 % of the rate, not constant
    assert len(set(per_second.tolist())) > 30


def test_file_names_and_modification_times_follow_event_time(minute):
    folder, stats, _ = minute
    files = parts(folder)
    assert stats["files"] == len(files) == 120
    assert [p.name for p in files] == [f"part-{i:08d}.json" for i in range(120)]
    mtimes = [p.stat().st_mtime_ns for p in files]
    assert all(a < b for a, b in zip(mtimes, mtimes[1:]))
    assert not [p for p in folder.iterdir() if not p.name.startswith("part-")]  # no staging file left


def test_same_seed_same_output_other_seed_other_output(tmp_path):
    def contents(name: str, seed: int) -> list[bytes]:
        generate_cm(tmp_path / name, rate=300, seconds=5, seed=seed, progress=False)
        return [p.read_bytes() for p in parts(tmp_path / name)]

    first = contents("a", 7)
    assert contents("b", 7) == first
    other = contents("c", 8)
    assert len(other) == len(first) and all(x != y for x, y in zip(first, other))


@pytest.mark.parametrize("fps, files, seconds_per_file", [(1, 12, 1), (4, 48, 0.25), (0.25, 3, 4), (0.5, 6, 2)])
def test_files_per_second(tmp_path, fps, files, seconds_per_file):
    stats = generate_cm(tmp_path, rate=200, seconds=12, seed=1, files_per_second=fps, progress=False)
    assert stats["files"] == len(parts(tmp_path)) == files
    span = int(seconds_per_file * 1_000_000)
    for index, path in enumerate(parts(tmp_path)):
        times = [json.loads(line)["time"] for line in path.read_text().splitlines()]
        assert times and index * span <= min(times) and max(times) < (index + 1) * span
    assert sum(1 for _ in read(tmp_path)) == stats["records"]


def test_large_runs_are_written_in_chunks_and_stay_in_order(tmp_path, monkeypatch):
    import jobs.gen.cm as gen

    monkeypatch.setattr(gen, "CHUNK_RECORDS", 700)  # several chunks per file and files across chunks
    monkeypatch.setattr(gen, "WRITE_ROWS", 90)
    stats = generate_cm(tmp_path / "chunked", rate=500, seconds=9, seed=2, files_per_second=0.3, progress=False)
    monkeypatch.setattr(gen, "CHUNK_RECORDS", 1 << 20)
    monkeypatch.setattr(gen, "WRITE_ROWS", 100_000)
    rows = read(tmp_path / "chunked")
    assert stats["files"] == 3 and len(rows) == stats["records"]
    assert [r["time"] for r in rows] == sorted(r["time"] for r in rows)
    assert not list((tmp_path / "chunked").glob(".*"))


def test_stale_staging_files_are_replaced_and_no_events_gives_empty_files(tmp_path):
    (tmp_path / ".part-00000000.json.tmp").write_text('{"stale": 1}\n')
    stats = generate_cm(tmp_path, rate=0, seconds=3, progress=False)
    assert stats == {"files": 3, "records": 0, "first_time_us": None, "last_time_us": None}
    assert [p.read_text() for p in parts(tmp_path)] == ["", "", ""]
    assert not list(tmp_path.glob(".*"))


def test_invalid_arguments(tmp_path):
    for kwargs in (
        {"rate": -1, "seconds": 1},
        {"rate": 1, "seconds": 0},
        {"rate": 1, "seconds": 1, "files_per_second": 0},
    ):
        with pytest.raises(ValueError):
            generate_cm(tmp_path, **kwargs)


def test_misa_gen_cm_command(tmp_path, capsys):
    out = tmp_path / "cm"
    args = [
        "gen",
        "cm",
        "--out",
        str(out),
        "--rate",
        "100",
        "--seconds",
        "4",
        "--seed",
        "9",
        "--files-per-second",
        "0.5",
        "--jobs",
        "20",
        "--start-time-us",
        "1000000000",
    ]
    assert misa(args) == 0
    summary = capsys.readouterr().out.strip()
    assert len(summary.splitlines()) == 1 and "2 files" in summary and str(out) in summary
    rows = read(out)
    assert len(parts(out)) == 2 and f"{len(rows)} records" in summary
    assert {r["job_id"] for r in rows} <= set(range(JOB_ID_BASE, JOB_ID_BASE + 20))
    assert all(1_000_000_000 <= r["time"] < 1_004_000_000 for r in rows)
    assert misa(["gen", "cm", "--out", str(out), "--rate", "1", "--seconds", "0"]) == 2
    assert "misa: error" in capsys.readouterr().err


def test_files_without_events_in_the_middle_are_written_empty(tmp_path):
    stats = generate_cm(tmp_path, rate=1, seconds=10, files_per_second=4, progress=False)
    files = sorted(tmp_path.glob("part-*.json"))
    assert len(files) == stats["files"] == 40
    assert sum(len(f.read_text().splitlines()) for f in files) == stats["records"]
    assert any(f.stat().st_size == 0 for f in files[:-1])
    assert not list(tmp_path.glob(".*.tmp"))
