"""Cluster Monitoring input: task events with the Google cluster trace's task_events columns.

Records per second of event time are normally distributed around the rate (std 10 %); each
second's events are spread uniformly over it and sorted, so the whole output is in event-time
order. Job ids come from a pool in which a few jobs are hot. Files are JSON lines named
``part-<8 digits>.json`` in time order, each covering ``1 / files_per_second`` seconds; they are
written under a dot name (which Spark's file source ignores), given strictly increasing
modification times (the order in which Spark's file source picks up new files) and renamed
into place. Generation runs in chunks of about a million records, so memory stays bounded.
"""
from __future__ import annotations

import base64
import hashlib
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS = ("time", "missing_info", "job_id", "task_index", "machine_id", "event_type", "user", "scheduling_class",
           "priority", "cpu_request", "memory_request", "disk_request", "different_machines")
NULLABLE = ("missing_info", "machine_id", "different_machines")
# SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST, UPDATE_PENDING, UPDATE_RUNNING
EVENT_TYPE_P = np.array([0.25, 0.40, 0.02, 0.03, 0.15, 0.08, 0.02, 0.03, 0.02])
SCHEDULING_CLASS_P = np.array([0.45, 0.30, 0.20, 0.05])
JOB_ID_BASE = 6_000_000_000  # job ids in the trace are around 6e9: they need a long
USERS = 100
HOT_SHARE = 0.2  # share of events that go to the hot jobs
HOT_FRACTION = 0.01  # share of the jobs that are hot
MTIME_BASE = 1_700_000_000  # modification time of the first file (s); file i gets MTIME_BASE + i
CHUNK_RECORDS = 1 << 20
WRITE_ROWS = 100_000
US = 1_000_000


def user_tokens(n: int = USERS) -> np.ndarray:
    """A pool of ``n`` short, hashed-looking user names (the trace's are base64 hashes)."""
    digests = (hashlib.sha256(f"misa-user-{i}".encode()).digest() for i in range(n))
    return np.array([base64.urlsafe_b64encode(d).decode()[:12] for d in digests])


def generate_cm(out_dir: str | Path, rate: float, seconds: int, seed: int = 0, files_per_second: float = 1.0,
                start_time_us: int = 0, *, jobs: int = 10_000, progress: bool = True) -> dict:
    """Write ``seconds`` of task events at about ``rate`` records/s into ``out_dir``.

    Deterministic for given arguments. Returns ``files``, ``records``, ``first_time_us`` and
    ``last_time_us`` (``None`` when no record was drawn).
    """
    if rate < 0 or seconds <= 0 or files_per_second <= 0 or jobs <= 0:
        raise ValueError("rate >= 0, seconds > 0, files_per_second > 0 and jobs > 0 are required")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_second = np.clip(np.rint(rng.normal(rate, rate * 0.1, seconds)), 0, None).astype(np.int64)
    span_us = US / files_per_second
    files = max(1, math.ceil(seconds * files_per_second - 1e-9))
    users = user_tokens()
    total, first, last, done = int(per_second.sum()), None, None, 0
    started: set[int] = set()  # files with a staging file of this run
    cumulative = np.concatenate(([0], np.cumsum(per_second)))
    begin = 0
    while begin < seconds:
        end = int(np.searchsorted(cumulative, cumulative[begin] + CHUNK_RECORDS, side="right")) - 1
        end = min(seconds, max(end, begin + 1))
        table = _events(rng, per_second[begin:end], begin, jobs, users)
        offsets = table["time"].to_numpy()
        file_of = np.minimum((offsets // span_us).astype(np.int64), files - 1)
        table["time"] += start_time_us
        if len(table):
            first = int(table["time"].iat[0]) if first is None else first
            last = int(table["time"].iat[-1])
        indices = np.unique(file_of)
        lows, highs = np.searchsorted(file_of, indices, "left"), np.searchsorted(file_of, indices, "right")
        for index, low, high in zip(indices.tolist(), lows, highs):
            _write(_staging(out, index), table.iloc[low:high], append=index in started)
            started.add(index)
        complete = files if end == seconds else min(files, int(end * US // span_us))
        for index in range(done, complete):
            if index not in started:  # no event fell in this file
                _write(_staging(out, index), table.iloc[:0], append=False)
            _finish(out, index)
            if progress and seconds >= 60 and (index + 1) % max(1, files // 10) == 0:
                print(f"gen cm: {index + 1}/{files} files", file=sys.stderr, flush=True)
        done, begin = complete, end
    return {"files": files, "records": total, "first_time_us": first, "last_time_us": last}


def _events(rng: np.random.Generator, counts: np.ndarray, first_second: int, jobs: int,
            users: np.ndarray) -> pd.DataFrame:
    """The events of consecutive seconds (``counts`` per second), sorted; ``time`` is the offset in µs."""
    n = int(counts.sum())
    seconds = np.repeat(np.arange(first_second, first_second + len(counts), dtype=np.int64), counts)
    times = seconds * US + rng.integers(0, US, n)
    times.sort()
    hot = max(1, int(jobs * HOT_FRACTION))
    job_index = np.where(rng.random(n) < HOT_SHARE, rng.integers(0, hot, n), rng.integers(0, jobs, n))
    columns = {
        "time": times,
        "missing_info": _nullable(rng.random(n) >= 0.01, np.ones(n, dtype=np.int64)),
        "job_id": JOB_ID_BASE + job_index,
        "task_index": rng.integers(0, 500, n),
        "machine_id": _nullable(rng.random(n) < 0.1, rng.integers(1, 12_500, n) * 1000 + 5),
        "event_type": rng.choice(len(EVENT_TYPE_P), n, p=EVENT_TYPE_P),
        "user": users[rng.integers(0, len(users), n)],
        "scheduling_class": rng.choice(len(SCHEDULING_CLASS_P), n, p=SCHEDULING_CLASS_P),
        "priority": rng.integers(0, 12, n),
        "cpu_request": np.round(np.minimum(rng.gamma(2.0, 0.02, n), 1.0), 6),
        "memory_request": np.round(np.minimum(rng.gamma(2.0, 0.015, n), 1.0), 6),
        "disk_request": np.round(rng.exponential(0.0004, n), 6),
        "different_machines": _nullable(rng.random(n) < 0.05, rng.integers(0, 2, n)),
    }
    return pd.DataFrame(columns)


def _nullable(missing: np.ndarray, values: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(values.astype(np.int64), missing)


def _staging(out: Path, index: int) -> Path:
    return out / f".part-{index:08d}.json.tmp"  # Spark's file source ignores names starting with a dot


def _write(path: Path, rows: pd.DataFrame, append: bool) -> None:
    """Append ``rows`` as JSON lines to ``path``, or start it afresh (dropping a stale staging file)."""
    with open(path, "ab" if append else "wb") as f:
        for start in range(0, len(rows), WRITE_ROWS):  # to_json slows down on very large frames
            text = rows.iloc[start:start + WRITE_ROWS].to_json(orient="records", double_precision=6)
            f.write((text[1:-1].replace("},{", "}\n{") + "\n").encode())  # no value holds braces


def _finish(out: Path, index: int) -> None:
    """Give file ``index`` its modification time and move it into place."""
    staging = _staging(out, index)
    mtime = MTIME_BASE + index
    os.utime(staging, (mtime, mtime))
    os.replace(staging, out / f"part-{index:08d}.json")
