"""A query as users deploy it, through misa.from_query and through plain Spark, compared batch id by batch id.

A :class:`Scenario` builds its streaming DataFrame with Spark's API over inputs of its own (file folders, globs,
subfolders, a static table, the ``rate-micro-batch`` source, the tests' own Python source, Kafka topics of the
project's broker: :mod:`verify.differential.kafka_inputs`), feeds them in rounds
and runs each round as a new query over the same checkpoint (a restarted driver) with its trigger. Both engines'
outputs are keyed by Spark's batch ids: the batch ids run must be the same (batches without data included) and
so must each batch's rows and column types.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from misa import MisaConfig, from_query
from misa.exceptions import AnalysisError as MisaAnalysisError
from misa.exceptions import UnsupportedQueryError
from verify.differential.kafka_inputs import KafkaInputs
from verify.differential.runner import Mismatch, _first_line, compare, is_query_refusal

Rows = tuple[dict[str, Any], ...]
_WRITTEN = itertools.count()
Builder = Callable[[SparkSession, Path], DataFrame]  # the query over the scenario's inputs under a folder


def drifting_rows(
    seed: int,
    batches: int,
    per_batch: int,
    keys: int,
    values: int,
    step_s: float,
    late_s: float,
    partitions: int | None = None,
) -> tuple[Rows, ...]:
    """``batches`` batches of keyed rows (``k``, ``v``, ``t`` in epoch seconds, ``side`` 0 or 1), event time moving
    forward ``step_s`` a row with a tenth of the rows out of order by up to ``late_s``; with ``partitions``, each row
    names its Kafka partition (``_partition``, :mod:`verify.differential.kafka_inputs`)."""
    rng = random.Random(seed)
    clock, out = 100.0, []
    for _ in range(batches):
        rows = []
        for _ in range(per_batch):
            clock += step_s
            t = clock - rng.uniform(0, late_s) if rng.random() < 0.1 else clock
            row = {"k": rng.randrange(keys), "v": rng.randrange(values), "t": round(t, 3), "side": rng.randrange(2)}
            if partitions:
                row["_partition"] = rng.randrange(partitions)
            rows.append(row)
        out.append(tuple(rows))
    return tuple(out)


@dataclass(frozen=True)
class Round:
    """What one run gets: ``files`` (path under the inputs, rows as JSON lines) written before it starts, then
    ``later`` files written while it runs (a processing-time query), each once the query has been quiet for
    ``quiet_s`` (no batch ran: its triggers found nothing to do), so that both engines see the same triggers;
    ``batches``: for a source that always has input, the run stops once this many batches of it ran."""

    files: tuple[tuple[str, Rows], ...] = ()
    later: tuple[tuple[str, Rows], ...] = ()
    batches: int | None = None
    quiet_s: float = 5.0
    before: Callable[[Path], None] | None = None  # run on the engine's inputs before the round (a topic changed)


@dataclass(frozen=True)
class Scenario:
    """A query, its output mode, its trigger (as ``DataStreamWriter.trigger`` takes it) and its rounds."""

    name: str
    build: Builder
    output_mode: str
    rounds: tuple[Round, ...]
    trigger: dict[str, Any] = field(default_factory=lambda: {"availableNow": True})
    conf: dict[str, str] = field(default_factory=dict)  # misa's settings
    session_conf: dict[str, str] = field(default_factory=dict)  # Spark's, set on the session for both engines
    folders: tuple[str, ...] = ()  # made at start, for a source whose first file comes later (or never)
    kafka: KafkaInputs | None = None  # the topics of a scenario on Kafka: a file path ``kafka/NAME/...`` produces


@dataclass(frozen=True)
class Outcome:
    """How a scenario went: ``refused`` names who refused it at start (Spark, as ``writeStream.start()`` would, and
    misa with it; or misa alone, with its message), else ``mismatch`` is the first difference (None: Spark's rows)."""

    mismatch: Mismatch | None = None
    refused: str = ""
    message: str = ""
    spark_rows: int = 0  # the rows Spark wrote over the run (a check that passes on no rows checks nothing)

    @property
    def ok(self) -> bool:
        return self.mismatch is None and not self.refused


def run_scenario(spark: SparkSession, scenario: Scenario, work: Path) -> Outcome:
    """Run ``scenario`` through both engines under ``work`` (emptied first). A query Spark refuses at start must be
    refused by misa at start; one misa refuses must be refused at start (``UnsupportedQueryError``, before any batch
    ran); a query whose run fails in Spark must fail in misa too; anything else must give Spark's batches and rows."""
    shutil.rmtree(work, ignore_errors=True)
    outputs: dict[str, dict[int, pa.Table]] = {"spark": {}, "misa": {}}
    refused: dict[str, BaseException] = {}
    failed: dict[str, BaseException] = {}
    previous = {key: spark.conf.get(key, None) for key in scenario.session_conf}
    for key, value in scenario.session_conf.items():
        spark.conf.set(key, value)
    try:
        for engine in outputs:
            inputs = work / engine / "inputs"
            inputs.mkdir(parents=True)
            for folder in scenario.folders:
                (inputs / folder).mkdir(parents=True, exist_ok=True)
            if scenario.kafka is not None:
                scenario.kafka.create(inputs)
            for round_ in scenario.rounds:  # a file source needs its folder at start, before its first file
                for path, _ in (*round_.files, *round_.later):
                    (inputs / path).parent.mkdir(parents=True, exist_ok=True)
            for number, round_ in enumerate(scenario.rounds):
                if round_.before is not None:
                    round_.before(inputs)
                _write(inputs, round_.files, scenario.kafka)
                try:
                    _run_round(spark, scenario, round_, engine, inputs, work / engine / "ckpt", outputs[engine])
                except _Refused as refusal:
                    if number or outputs[engine]:
                        failed[engine] = refusal.error
                    else:
                        refused[engine] = refusal.error
                    break
                except Exception as error:  # noqa: BLE001 - a failed run is judged against the other engine's
                    failed[engine] = error
                    break
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    return judge(refused, failed, outputs)


def judge(
    refused: dict[str, BaseException], failed: dict[str, BaseException], outputs: dict[str, dict[int, pa.Table]]
) -> Outcome:
    """The outcome of a scenario from what each engine refused at start, which runs failed, and their outputs."""
    if failed.keys() == {"spark", "misa"} and is_query_refusal(failed["spark"]):  # Spark cannot run it either
        return Outcome(refused="Spark", message=f"while running: {_first_line(failed['spark'])}")
    for engine, error in failed.items():
        return Outcome(Mismatch(None, f"{engine} failed while running: {type(error).__name__}: {_first_line(error)}"))
    spark_error, misa_error = refused.get("spark"), refused.get("misa")
    if spark_error is not None:
        if misa_error is None:
            return Outcome(Mismatch(None, f"Spark refused it at start ({_first_line(spark_error)}), misa ran it"))
        return Outcome(refused="Spark", message=_first_line(spark_error))
    if misa_error is not None:
        if not isinstance(misa_error, UnsupportedQueryError):
            return Outcome(
                Mismatch(None, f"misa failed at start: {type(misa_error).__name__}: {_first_line(misa_error)}")
            )
        return Outcome(refused="misa", message=_first_line(misa_error))
    spark_rows = sum(table.num_rows for table in outputs["spark"].values())
    return Outcome(compare(outputs["spark"], outputs["misa"]), spark_rows=spark_rows)


class _Refused(Exception):
    """An engine refused the query at start (before its query ran a batch)."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


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
    job = None
    try:
        query_df = scenario.build(spark, inputs)
        if engine == "spark":
            writer = query_df.writeStream.outputMode(scenario.output_mode).option("checkpointLocation", str(checkpoint))
            sink = writer.foreachBatch(lambda df, batch_id: outputs.__setitem__(batch_id, df.toArrow()))
            query = sink.trigger(**scenario.trigger).start()
        else:
            config = MisaConfig.from_mapping(scenario.conf)
            job = from_query(
                query_df,
                outputs.__setitem__,
                str(checkpoint),
                output_mode=scenario.output_mode,
                config=config,
                echo=None,
            )
            query = job.start(scenario.trigger)
    except BaseException as error:
        if job is not None:
            job.close()
        if isinstance(error, MisaAnalysisError) or (isinstance(error, AnalysisException) and is_query_refusal(error)):
            raise _Refused(error) from error
        raise
    try:
        for path, rows in round_.later:
            _await_quiet(query, round_.quiet_s)
            _write(inputs, ((path, rows),), scenario.kafka)
        if round_.batches is not None:
            _await_batches(query, outputs, seen, round_.batches)
            query.stop()
        elif round_.later or not {"availableNow", "once"} & set(scenario.trigger):  # a trigger that never ends
            _await_quiet(query, round_.quiet_s)
            query.stop()
        query.awaitTermination()
    finally:
        if job is not None:
            job.close()
    if round_.batches is not None:  # batches past the count ran while the query stopped: not compared
        for batch in sorted(set(outputs) - seen)[round_.batches :]:
            del outputs[batch]


def _await_quiet(query: Any, quiet_s: float) -> None:
    """Until a trigger has ended, no batch has started for ``quiet_s`` and none runs (the query's triggers find nothing
    to do). Not quiet before the first trigger ended: a Python source may take seconds to start, and a Kafka source
    resolves ``latest`` starting offsets in it (a record produced before that is skipped)."""
    deadline, last, since, triggered = time.monotonic() + 120, None, time.monotonic(), False
    while time.monotonic() < deadline:
        progress = query.lastProgress
        batch = None if progress is None else progress["batchId"]
        status = query.status
        starting = status["message"] == "Initializing sources"
        triggered = triggered or not starting and not status["isTriggerActive"]
        if batch != last or not triggered or status["isTriggerActive"] and status["isDataAvailable"]:
            last, since = batch, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        if not query.isActive:
            query.awaitTermination()
        threading.Event().wait(0.1)
    raise TimeoutError("the query did not become quiet within 120 s")


def _await_batches(query: Any, outputs: dict[int, pa.Table], seen: set[int], batches: int) -> None:
    deadline = time.monotonic() + 120
    while len(set(outputs) - seen) < batches:
        if not query.isActive:
            query.awaitTermination()
            raise RuntimeError(f"the query ended after {len(set(outputs) - seen)} of {batches} batches")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{batches} batches did not run within 120 s")
        threading.Event().wait(0.05)


def _write(inputs: Path, files: tuple[tuple[str, Rows], ...], kafka: KafkaInputs | None = None) -> None:
    """Write each file atomically (a dot name, then a rename), modification times in the order written (Spark
    orders new files by them); a path ``kafka/NAME/...`` produces its rows to the engine's topic NAME instead."""
    for path, rows in files:
        if kafka is not None and path.startswith("kafka/"):
            kafka.produce(inputs, path.split("/")[1], rows)
            continue
        target = inputs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        hidden = target.with_name("." + target.name)
        hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
        stamp = 1_000_000 + next(_WRITTEN)
        os.utime(hidden, (stamp, stamp))
        os.replace(hidden, target)
