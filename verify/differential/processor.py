"""Spark's ``transformWithStateInPandas`` against misa's StatefulProcessor adapter, on the same processor.

:class:`SessionFraudProcessor` is a session-tracking fraud rule written only against Spark's API: per card it
keeps a count and a total (value state), each batch's largest amount (list state), a count per merchant (map
state) and an event-time timer that closes the card's session ``GAP_MS`` after its latest payment. Each batch
it emits one row per card (flagged when the batch's largest amount is over twice the card's average so far);
a session's end emits a summary row and clears the card's state. Its outputs do not depend on the order of a
card's rows within a batch, so Spark's and misa's rows compare as multisets.

:func:`run_processor_case` runs one random case (a differential :class:`~verify.differential.cases.Case` of a
stream of payments) through both engines, batch by batch, with restarts between rounds.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from misa import MisaConfig, transform_with_state_in_pandas
from verify.differential.cases import Case, Query, Settings, case_of, with_placement
from verify.differential.runner import Mismatch, _first_line, _write_file, compare

OUTPUT = "card string, kind string, payments long, total long, largest long, merchants long, flagged boolean"
GAP_MS = 10_000
EVENT_TIME = "event_time"
SOURCE = "card string, t bigint, amount bigint, merchant string"
INITIAL = [("", 3, 30), ("a", 1, 500), ("b", 2, 4)]  # cards' (payments, total) before the stream
RUN_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    )
}


class SessionFraudProcessor(StatefulProcessor):
    """Per card: running count and total, each batch's largest amount, payments per merchant, a session timer."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.totals = handle.getValueState("totals", "payments long, total long")
        self.largest = handle.getListState("largest", "amount long")
        self.merchants = handle.getMapState("merchants", "merchant string", "payments long")
        self.session_end = handle.getValueState("session_end", "at long")

    def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues: TimerValues):  # noqa: N802, N803
        batch = pd.concat(list(rows), ignore_index=True)
        payments, total = self.totals.get() if self.totals.exists() else (0, 0)
        amounts = batch["amount"].fillna(0).astype("int64")
        largest = int(amounts.max())
        flagged = payments > 0 and largest * payments > 2 * total
        payments, total = payments + len(batch), total + int(amounts.sum())
        self.totals.update((payments, total))
        self.largest.appendValue((largest,))
        for merchant, count in batch["merchant"].fillna("?").value_counts().items():
            before = self.merchants.getValue((merchant,))
            self.merchants.updateValue((merchant,), ((before[0] if before else 0) + int(count),))
        end = int(batch[EVENT_TIME].max().timestamp() * 1000) + GAP_MS
        if self.session_end.exists():
            previous = self.session_end.get()[0]
            if previous >= end:
                end = previous
            else:
                self.handle.deleteTimer(previous)
        self.handle.registerTimer(end)
        self.session_end.update((end,))
        yield self._row(key, "batch", payments, total, largest, flagged)

    def handleInitialState(self, key, initialState: pd.DataFrame, timerValues: TimerValues) -> None:  # noqa: N802, N803
        """A card's history before the stream: its payments and total so far."""
        self.totals.update((int(initialState["payments"].sum()), int(initialState["total"].sum())))

    def handleExpiredTimer(self, key, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo):  # noqa: N802, N803
        payments, total = self.totals.get() if self.totals.exists() else (0, 0)
        largest = max((v[0] for v in self.largest.get()), default=0)
        row = self._row(key, "session", payments, total, largest, False)
        for variable in (self.totals, self.largest, self.merchants, self.session_end):
            variable.clear()
        yield row

    def _row(self, key, kind: str, payments: int, total: int, largest: int, flagged: bool) -> pd.DataFrame:
        merchants = sum(1 for _ in self.merchants.keys()) if kind == "batch" else 0
        return pd.DataFrame(
            {
                "card": [key[0]],
                "kind": [kind],
                "payments": [payments],
                "total": [total],
                "largest": [largest],
                "merchants": [merchants],
                "flagged": [flagged],
            }
        )

    def close(self) -> None:
        pass


def random_processor_case(seed: int) -> Case:
    """Random payments of a few cards (nulls and edge strings among them), with late and out-of-order rows,
    back-to-back batches and restarts; misa with one or two worker processes, prefetching on, off or auto."""
    settings = Settings(
        processes=1 + seed % 2,
        commit_mode=("misa", "sync", "async-ckpt")[seed % 3],
        prefetching=("true", "false", "auto")[seed // 3 % 3],
    )
    query = Query("processor", {"k0": "string"}, delay_s=(0, 2, 5)[seed % 3], above=seed % 4 < 2)
    return case_of(query, with_placement(seed, settings), seed)


def initial_state(spark: SparkSession, case: Case) -> DataFrame | None:
    """The cards' history the case starts from (cases whose ``above`` flag is set), or None."""
    if not case.query.above:
        return None
    return spark.createDataFrame(INITIAL, "card string, payments long, total long")


def payments(rows: DataFrame) -> DataFrame:
    return rows.withColumn(EVENT_TIME, F.timestamp_millis("t"))


def run_processor_case(spark: SparkSession, case: Case, work: Path) -> Mismatch | None:
    """The case's payments (keys as cards, values as amounts) through Spark's transformWithStateInPandas and
    misa's adapter, with the processor above; the first batch whose rows differ."""
    shutil.rmtree(work, ignore_errors=True)
    source = work / "input"
    source.mkdir(parents=True)
    previous = {key: spark.conf.get(key, None) for key in (*RUN_CONF, "spark.sql.shuffle.partitions")}
    for key, value in {**RUN_CONF, "spark.sql.shuffle.partitions": "2"}.items():
        spark.conf.set(key, value)
    try:
        native: dict[int, pa.Table] = {}
        misa: dict[int, pa.Table] = {}
        written = 0
        for files in case.rounds:
            for rows in files:
                _write_file(source, written, tuple(_payment(r) for r in rows))
                written += 1
            native.update(_native(spark, case, source, work / "native"))
            misa.update(_misa(spark, case, source, work / "misa"))
    except Exception as error:  # noqa: BLE001 - a failure in either engine is a finding
        return Mismatch(None, f"{type(error).__name__}: {_first_line(error)}")
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    return compare(native, misa)


def _payment(row: dict) -> dict:
    return {"card": row.get("k0"), "t": row["t"], "amount": row["v"], "merchant": ("m1", "m2", "m3")[row["t"] % 3]}


def _stream(spark: SparkSession, source: Path) -> DataFrame:
    return payments(spark.readStream.schema(SOURCE).option("maxFilesPerTrigger", 1).json(str(source)))


def _native(spark: SparkSession, case: Case, source: Path, run: Path) -> dict[int, pa.Table]:
    outputs: dict[int, pa.Table] = {}
    initial = initial_state(spark, case)
    query = (
        _stream(spark, source)
        .withWatermark(EVENT_TIME, f"{case.query.delay_s} seconds")
        .groupBy("card")
        .transformWithStateInPandas(
            SessionFraudProcessor(),
            OUTPUT,
            "Append",
            "EventTime",
            initialState=initial.groupBy("card") if initial is not None else None,
        )
    )
    writer = query.writeStream.outputMode("append").option("checkpointLocation", str(run / "ckpt"))
    writer.foreachBatch(lambda df, b: outputs.__setitem__(b, df.toArrow())).trigger(
        availableNow=True
    ).start().awaitTermination()
    return outputs


def _misa(spark: SparkSession, case: Case, source: Path, run: Path) -> dict[int, pa.Table]:
    outputs: dict[int, pa.Table] = {}
    job = transform_with_state_in_pandas(
        _stream(spark, source).withWatermark(EVENT_TIME, f"{case.query.delay_s} seconds"),
        ["card"],
        SessionFraudProcessor(),
        OUTPUT,
        "Append",
        "EventTime",
        outputs.__setitem__,
        str(run / "ckpt"),
        initial_state=initial_state(spark, case),
        config=MisaConfig.from_mapping(case.settings.conf()),
        echo=None,
    )
    try:
        job.start({"availableNow": True}).awaitTermination()
    finally:
        job.close()
    return outputs
