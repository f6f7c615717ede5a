"""Cluster Monitoring input: task events with the Google cluster trace's task_events columns.

Records per second of event time are normally distributed around the rate (std 10 %); each
second's events are spread uniformly over it and sorted, so the whole output is in event-time
order. Job ids come from a pool in which a few jobs are hot. The part files, each covering
``1 / files_per_second`` seconds, are written by :class:`jobs.gen.parts.PartWriter` (strictly
increasing modification times: the order in which Spark's file source picks up new files).
Generation runs in chunks of about a million records, so memory stays bounded.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from jobs.gen.parts import LateArrivals, PartWriter

COLUMNS = (
    "time",
    "missing_info",
    "job_id",
    "task_index",
    "machine_id",
    "event_type",
    "user",
    "scheduling_class",
    "priority",
    "cpu_request",
    "memory_request",
    "disk_request",
    "different_machines",
)
NULLABLE = ("missing_info", "machine_id", "different_machines")
# SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST, UPDATE_PENDING, UPDATE_RUNNING
EVENT_TYPE_P = np.array([0.25, 0.40, 0.02, 0.03, 0.15, 0.08, 0.02, 0.03, 0.02])
SCHEDULING_CLASS_P = np.array([0.45, 0.30, 0.20, 0.05])
JOB_ID_BASE = 6_000_000_000  # job ids in the trace are around 6e9: they need a long
USERS = 100
HOT_SHARE = 0.2  # share of events that go to the hot jobs
HOT_FRACTION = 0.01  # share of the jobs that are hot
CHUNK_RECORDS = 1 << 20  # more than the other generators: CM's rows are cheap to draw
WRITE_ROWS = 100_000
US = 1_000_000


def user_tokens(n: int = USERS) -> np.ndarray:
    """A pool of ``n`` short, hashed-looking user names (the trace's are base64 hashes)."""
    digests = (hashlib.sha256(f"misa-user-{i}".encode()).digest() for i in range(n))
    return np.array([base64.urlsafe_b64encode(d).decode()[:12] for d in digests])


def generate_cm(
    out_dir: str | Path,
    rate: float,
    seconds: int,
    seed: int = 0,
    files_per_second: float = 1.0,
    start_time_us: int = 0,
    *,
    jobs: int = 10_000,
    progress: bool = True,
    late: LateArrivals | None = None,
) -> dict:
    """Write ``seconds`` of task events at about ``rate`` records/s into ``out_dir``.

    Deterministic for given arguments. Returns ``files``, ``records``, ``first_time_us`` and
    ``last_time_us`` (``None`` when no record was drawn).
    """
    if rate < 0 or seconds <= 0 or files_per_second <= 0 or jobs <= 0:
        raise ValueError("rate >= 0, seconds > 0, files_per_second > 0 and jobs > 0 are required")
    rng = np.random.default_rng(seed)
    per_second = np.clip(np.rint(rng.normal(rate, rate * 0.1, seconds)), 0, None).astype(np.int64)
    writer = PartWriter(
        out_dir, "cm", seconds, files_per_second, unit="us", start=start_time_us, progress=progress, late=late
    )
    users = user_tokens()
    cumulative = np.concatenate(([0], np.cumsum(per_second)))
    begin = 0
    while begin < seconds:
        end = int(np.searchsorted(cumulative, cumulative[begin] + CHUNK_RECORDS, side="right")) - 1
        end = min(seconds, max(end, begin + 1))
        table = _events(rng, per_second[begin:end], begin, jobs, users)
        table["time"] += start_time_us
        writer.write(table["time"].to_numpy(), _lines(table))
        begin = end
    return writer.close()


def _events(
    rng: np.random.Generator, counts: np.ndarray, first_second: int, jobs: int, users: np.ndarray
) -> pd.DataFrame:
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


def _lines(rows: pd.DataFrame) -> list[str]:
    """The rows as JSON lines (6 significant decimals), written in blocks: to_json slows down on very large frames."""
    lines: list[str] = []
    for start in range(0, len(rows), WRITE_ROWS):
        text = rows.iloc[start : start + WRITE_ROWS].to_json(orient="records", double_precision=6)
        lines += text[1:-1].replace("},{", "}\n{").split("\n")  # no value holds braces
    return lines
