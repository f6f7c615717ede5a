"""The runs in one series of per-batch metrics records, and the batches of each run past its warm-up.

Restarts append to the same metrics file, so one mode's records may hold several runs. A run begins
at the first record, where ``run_started`` (the time the run's query started, written with every
record) changes, and where the batch id does not increase (a restart replays or goes back; this
also finds restarts in files written without ``run_started``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

#: Batches at the start of every run left out of the steady-state numbers: in the first batches the JVM
#: loads classes and generates the query's code, Spark starts its Python workers, and the JIT compiles.
WARMUP_BATCHES = 3


def _number(value: Any) -> float | None:
    kind = type(value)
    return float(value) if kind is int or (kind is float and math.isfinite(value)) else None


def run_starts(records: Sequence[dict[str, Any]]) -> list[int]:
    """Positions of the records that begin a run (0 first, when there are records)."""
    starts: list[int] = []
    previous: dict[str, Any] | None = None
    for i, record in enumerate(records):
        if previous is None or _begins_run(previous, record):
            starts.append(i)
        previous = record
    return starts


def _begins_run(previous: dict[str, Any], record: dict[str, Any]) -> bool:
    run, last_run = record.get("run_started"), previous.get("run_started")
    if run is not None and last_run is not None and run != last_run:
        return True
    batch, last_batch = _number(record.get("batch_id")), _number(previous.get("batch_id"))
    return batch is not None and last_batch is not None and batch <= last_batch


def split_runs(records: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records cut into runs, in order."""
    bounds = [*run_starts(records), len(records)]
    return [list(records[a:b]) for a, b in zip(bounds, bounds[1:])]


def steady(records: Sequence[dict[str, Any]], warmup: int = WARMUP_BATCHES) -> list[dict[str, Any]]:
    """The records without the first ``warmup`` batches of each run."""
    return [record for run in split_runs(records) for record in run[warmup:]]
