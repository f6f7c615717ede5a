"""A query as users deploy it, through misa.from_query and through plain Spark, compared batch id by batch id.

A :class:`Scenario` builds its streaming DataFrame with Spark's API over inputs of its own (file folders, globs,
subfolders, a static table, the ``rate-micro-batch`` source, the tests' own Python source), feeds them in rounds
and runs each round as a new query over the same checkpoint (a restarted driver) with its trigger. Both engines'
outputs are keyed by Spark's batch ids: the batch ids run must be the same (batches without data included) and
so must each batch's rows and column types.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from jobs.differential.runner import Mismatch, _first_line, _rows, _types
from jobs.output_diff import diff_rows
from misa import MisaConfig, from_query

Rows = tuple[dict[str, Any], ...]
_WRITTEN = itertools.count()
Builder = Callable[[SparkSession, Path], DataFrame]  # the query over the scenario's inputs under a folder


@dataclass(frozen=True)
class Round:
    """What one run gets: ``files`` (path under the inputs, rows as JSON lines) written before it starts, then
    ``later`` files written while it runs (a processing-time query, ``pause_s`` apart); ``batches``: for a source
    that always has input, the run stops once this many batches of it ran."""

    files: tuple[tuple[str, Rows], ...] = ()
    later: tuple[tuple[str, Rows], ...] = ()
    batches: int | None = None
    pause_s: float = 2.5


@dataclass(frozen=True)
class Scenario:
    """A query, its output mode, its trigger (as ``DataStreamWriter.trigger`` takes it) and its rounds."""

    name: str
    build: Builder
    output_mode: str
    rounds: tuple[Round, ...]
    trigger: dict[str, Any] = field(default_factory=lambda: {"availableNow": True})
    conf: dict[str, str] = field(default_factory=dict)  # misa's settings


def run_scenario(spark: SparkSession, scenario: Scenario, work: Path) -> Mismatch | None:
    """Run ``scenario`` through both engines under ``work`` (emptied first); the first difference, or None."""
    shutil.rmtree(work, ignore_errors=True)
    outputs: dict[str, dict[int, pa.Table]] = {"spark": {}, "misa": {}}
    try:
        for engine in outputs:
            inputs = work / engine / "inputs"
            inputs.mkdir(parents=True)
            for round_ in scenario.rounds:
                _write(inputs, round_.files)
                _run_round(spark, scenario, round_, engine, inputs, work / engine / "ckpt", outputs[engine])
    except Exception as error:  # noqa: BLE001 - a failure in either engine is a finding, reported with the case
        return Mismatch(None, f"{type(error).__name__}: {_first_line(error)}")
    return compare_by_batch(outputs["spark"], outputs["misa"])


def compare_by_batch(native: dict[int, pa.Table], misa: dict[int, pa.Table]) -> Mismatch | None:
    """The first batch id run by one engine only, or whose rows or column types differ."""
    if sorted(native) != sorted(misa):
        return Mismatch(None, f"Spark ran batches {sorted(native)}, misa {sorted(misa)}")
    for batch in sorted(native):
        expected, got = native[batch], misa[batch]
        if expected.num_rows + got.num_rows == 0:
            continue
        if _types(expected) != _types(got):
            return Mismatch(batch, f"columns {_types(got)}, Spark's {_types(expected)}")
        diff = diff_rows(_rows(got), _rows(expected))
        if not diff.ok:
            return Mismatch(batch, diff.describe(expected.column_names))
    return None


def _run_round(
    spark: SparkSession,
    scenario: Scenario,
    round_: Round,
    engine: str,
    inputs: Path,
    checkpoint: Path,
    outputs: dict[int, pa.Table],
) -> None:
    """One run of one engine: start, feed ``later`` files, stop (after ``batches``, or when the trigger ends it)."""
    seen = set(outputs)
    query_df = scenario.build(spark, inputs)
    if engine == "spark":
        writer = query_df.writeStream.outputMode(scenario.output_mode).option("checkpointLocation", str(checkpoint))
        sink = writer.foreachBatch(lambda df, batch_id: outputs.__setitem__(batch_id, df.toArrow()))
        query = sink.trigger(**scenario.trigger).start()
        job = None
    else:
        config = MisaConfig.from_mapping(scenario.conf)
        job = from_query(
            query_df, outputs.__setitem__, str(checkpoint), output_mode=scenario.output_mode, config=config, echo=None
        )
        query = job.start(scenario.trigger)
    try:
        for path, rows in round_.later:
            time.sleep(round_.pause_s)
            _write(inputs, ((path, rows),))
        if round_.later:
            time.sleep(round_.pause_s)
        if round_.batches is not None:
            _await_batches(query, outputs, seen, round_.batches)
            query.stop()
        elif round_.later:
            query.processAllAvailable()
            query.stop()
        query.awaitTermination()
    finally:
        if job is not None:
            job.close()
    if round_.batches is not None:  # batches past the count ran while the query stopped: not compared
        for batch in sorted(set(outputs) - seen)[round_.batches :]:
            del outputs[batch]


def _await_batches(query: Any, outputs: dict[int, pa.Table], seen: set[int], batches: int) -> None:
    deadline = time.monotonic() + 120
    while len(set(outputs) - seen) < batches:
        if not query.isActive:
            query.awaitTermination()
            raise RuntimeError(f"the query ended after {len(set(outputs) - seen)} of {batches} batches")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{batches} batches did not run within 120 s")
        threading.Event().wait(0.05)


def _write(inputs: Path, files: tuple[tuple[str, Rows], ...]) -> None:
    """Write each file atomically (a dot name, then a rename), modification times in the order written (Spark
    orders new files by them)."""
    for path, rows in files:
        target = inputs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        hidden = target.with_name("." + target.name)
        hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
        stamp = 1_000_000 + next(_WRITTEN)
        os.utime(hidden, (stamp, stamp))
        os.replace(hidden, target)
