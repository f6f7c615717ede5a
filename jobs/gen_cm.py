"""Cluster Monitoring input: task events with the Google cluster trace's task_events columns.

Records per second are normally distributed around the rate; each second's events are spread
uniformly over it and sorted, so the whole output is in event-time order. Files are JSON lines,
named ``part-<8 digits>.json`` in time order, written atomically and given strictly increasing
modification times (Spark's file source picks up new files in that order).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

EVENT_TYPES = np.arange(9)
EVENT_TYPE_P = np.array([0.25, 0.40, 0.02, 0.03, 0.15, 0.08, 0.02, 0.03, 0.02])  # SUBMIT .. UPDATE_RUNNING
TRACE_START_US = 600_000_000  # the trace's first events are at 600 s


def generate_cm(out_dir: str | Path, rate: float, seconds: int, seed: int = 0, files_per_second: float = 1.0,
                jobs: int = 10_000, start_time_us: int = TRACE_START_US, progress: bool = True) -> dict:
    """Write ``seconds`` of task events at about ``rate`` records/s into ``out_dir``; returns stats."""
    if rate < 0 or seconds <= 0 or files_per_second <= 0 or jobs <= 0:
        raise ValueError("rate >= 0, seconds > 0, files_per_second > 0 and jobs > 0 are required")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_second = np.clip(np.rint(rng.normal(rate, rate * 0.1, seconds)), 0, None).astype(np.int64)
    total = int(per_second.sum())
    second_of = np.repeat(np.arange(seconds), per_second)
    times = start_time_us + second_of * 1_000_000 + rng.integers(0, 1_000_000, total)
    times.sort()
    job_ids = 6_000_000_000 + _skewed(rng, jobs, total)
    columns = {
        "time": times,
        "missing_info": np.where(rng.random(total) < 0.01, 1, -1),
        "job_id": job_ids,
        "task_index": rng.integers(0, 500, total),
        "machine_id": np.where(rng.random(total) < 0.1, -1, rng.integers(1, 12_500, total) * 1000 + 5),
        "event_type": rng.choice(EVENT_TYPES, total, p=EVENT_TYPE_P),
        "user": rng.integers(0, 100, total),
        "scheduling_class": rng.choice(4, total, p=[0.45, 0.3, 0.2, 0.05]),
        "priority": rng.integers(0, 12, total),
        "cpu_request": np.round(rng.gamma(2.0, 0.02, total), 6),
        "memory_request": np.round(rng.gamma(2.0, 0.015, total), 6),
        "disk_request": np.round(rng.exponential(0.0004, total), 6),
        "different_machines": np.where(rng.random(total) < 0.05, -1, rng.integers(0, 2, total)),
    }
    table = pd.DataFrame(columns)
    for name in ("missing_info", "machine_id", "different_machines"):  # -1 marks a missing value
        table[name] = table[name].astype("Int64").mask(table[name] < 0)
    table["user"] = np.array([f"u{u:03d}" for u in range(100)])[columns["user"]]
    span_us = 1_000_000 / files_per_second
    file_of = ((times - start_time_us) // span_us).astype(np.int64)
    bounds = np.searchsorted(file_of, np.arange(int(np.ceil(seconds * files_per_second)) + 1))
    files = len(bounds) - 1
    mtime = 1_700_000_000
    for index in range(files):
        _write_file(out / f"part-{index:08d}.json", table.iloc[bounds[index]:bounds[index + 1]], mtime + index)
        if progress and seconds >= 60 and (index + 1) % max(1, files // 10) == 0:
            print(f"gen cm: {index + 1}/{files} files", file=sys.stderr, flush=True)
    return {"files": files, "records": total, "first_time_us": int(times[0]) if total else None,
            "last_time_us": int(times[-1]) if total else None}


def _skewed(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """Job ids: a fifth of the events hit 1% hot jobs, the rest spread uniformly over all jobs."""
    hot = max(1, n // 100)
    return np.where(rng.random(size) < 0.2, rng.integers(0, hot, size), rng.integers(0, n, size))


def _write_file(path: Path, rows: pd.DataFrame, mtime: int) -> None:
    staging = path.with_name(f".{path.name}.tmp")  # Spark's file source ignores dot files
    rows.to_json(staging, orient="records", lines=True)
    os.utime(staging, (mtime, mtime))
    os.replace(staging, path)
