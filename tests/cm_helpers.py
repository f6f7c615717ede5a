"""The job test helpers (job_helpers) bound to the Cluster Monitoring job, and CM's reference in plain Python."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path

import job_helpers
import numpy as np
import pandas as pd
from job_helpers import assert_same_output, assert_same_results, output  # noqa: F401  (re-exported for the CM tests)

from jobs import cluster_monitoring
from jobs.gen.cm import generate_cm
from jobs.gen.parts import LateArrivals
from verify.output_diff import Output

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def run_in_process(spark, query: str, mode: str, data: Path, run_dir: Path, output_mode: str | None = None) -> dict:
    return job_helpers.run_in_process(spark, cluster_monitoring, query, mode, data, run_dir, output_mode)


spark_submit = partial(job_helpers.spark_submit, cluster_monitoring)


def late_cm2_input(folder: Path, seed: int) -> Path:
    """CM2's kill-test input: 8 batches of two files, a tenth of the records 12 s late (out of order)."""
    late = LateArrivals(0.1, 12.0, seed=seed)
    generate_cm(folder, rate=200, seconds=128, seed=seed, files_per_second=0.125, jobs=200, late=late)
    return folder


#: The query of the tests that kill a state host: CM1's sum changes when a batch is applied twice or lost; CM2's
#: average does not see a batch applied twice (its sums and counts both double).
KILL_QUERY = "cm1"


def native_cm_output(spark, data: Path, run_dir: Path, query: str = "cm2") -> Output:
    """Plain Spark's whole output of CM ``query`` over ``data``, every row with its batch id."""
    run_in_process(spark, query, "native", data, run_dir)
    return output(run_dir)


results = partial(job_helpers.results, cluster_monitoring)


def read_events(data: Path) -> pd.DataFrame:
    """The generated task events (every ``part-*.json``), parsed with Python's json (exact doubles), without
    the records the job sets aside as bad (not JSON, or a required field missing)."""
    records = []
    for path in sorted(data.glob("part-*.json")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and all(record.get(f) is not None for f in cluster_monitoring.REQUIRED):
                records.append({f: record[f] for f in cluster_monitoring.REQUIRED})
    return pd.DataFrame.from_records(records, columns=list(cluster_monitoring.REQUIRED))


def expected_results(data: Path, query: str, output_mode: str = "update", watermark_delay_s: int = 5) -> dict:
    """CM1's or CM2's final result per (window_start, window_end, group), computed with pandas from the input.

    Sliding windows of ``window`` every ``slide`` (aligned to the epoch, as Spark's): an event at ``t`` is in
    each window with ``start <= t < start + window``. The input is in event-time order, so no event is late.
    In append mode only the windows the final watermark (the latest event time less the delay) has closed
    (``end <= watermark``) are emitted; in update mode every window has its final value.
    """
    q = cluster_monitoring.QUERIES[query]
    window_us, slide_us = (int(pd.Timedelta(s).total_seconds() * 1_000_000) for s in (q.window, q.slide))
    events = read_events(data)
    if q.where:  # CM2's event_type = 1
        column, value = q.where
        events = events[events[column] == value]
    starts = (events["time"].to_numpy() // slide_us) * slide_us
    offsets = np.arange(window_us // slide_us) * slide_us  # each event's windows: the latest start, and earlier
    rows = pd.DataFrame(
        {
            "start": (starts[:, None] - offsets[None, :]).ravel(),
            "group": np.repeat(events[q.group_by].to_numpy(), len(offsets)),
            "value": np.repeat(events[q.agg.column].to_numpy(), len(offsets)),
        }
    )
    function = {"sum": "sum", "avg": "mean"}[q.agg.function]
    final = rows.groupby(["start", "group"])["value"].agg(function)
    watermark = int(events["time"].max()) - watermark_delay_s * 1_000_000
    expected = {}
    for (start, group), value in final.items():
        end = start + window_us
        if output_mode == "append" and end > watermark:
            continue
        window_start, window_end = (EPOCH + timedelta(microseconds=int(t)) for t in (start, end))
        expected[window_start, window_end, int(group)] = {
            "window_start": window_start,
            "window_end": window_end,
            q.group_by: int(group),
            q.agg.name: float(value),
        }
    return expected
