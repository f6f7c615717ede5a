"""Spark's StatefulProcessor API on misa's state: value, list and map state, TTL, timers, restarts."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from counting_processor import CountingProcessor
from pyspark.sql import types as T
from pyspark.sql.streaming import StatefulProcessor

from misa.operators.processor import StatefulProcessorOperator


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Everything(CountingProcessor):
    """Counts rows per key in every kind of state, one with a TTL; a processing-time timer 5 s after a key's first
    row."""

    def init(self, handle) -> None:
        super().init(handle)
        self.handle = handle
        self.fresh = handle.getValueState("fresh", "n long", ttlDurationMs=3000)

    def handleInputRows(self, key, rows, timerValues):
        frame = pd.concat(list(rows))
        n = self.count_rows(frame)
        fresh = self.fresh.get()
        self.fresh.update((len(frame),))
        if not list(self.handle.listTimers()):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 5000)
        values = sorted(v for (v,) in self.seen.get())
        yield pd.DataFrame(
            {
                "k": [key[0]],
                "n": [n],
                "seen": [str(values)],
                "kinds": [len(list(self.per_value.keys()))],
                "fresh": [-1 if fresh is None else fresh[0]],
            }
        )

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        n = self.count.get()[0]
        self.count.clear()
        self.seen.clear()
        self.per_value.clear()
        yield pd.DataFrame({"k": [key[0]], "n": [-n], "seen": ["timer"], "kinds": [0], "fresh": [0]})


def schema(**fields: T.DataType) -> T.StructType:
    return T.StructType([T.StructField(name, dtype) for name, dtype in fields.items()])


OUTPUT = schema(k=T.StringType(), n=T.LongType(), seen=T.StringType(), kinds=T.LongType(), fresh=T.LongType())


def rows(*pairs: tuple[str, int]) -> pa.Table:
    return pa.table({"k": [k for k, _ in pairs], "v": pa.array([v for _, v in pairs], pa.int64())})


def output(result) -> list[tuple]:
    return sorted(tuple(r.values()) for r in result.output.to_pylist())


@pytest.fixture
def clock() -> Clock:
    return Clock()


def operator(clock: Clock) -> StatefulProcessorOperator:
    return StatefulProcessorOperator(Everything(), ["k"], OUTPUT, "ProcessingTime", clock=clock)


def test_value_list_and_map_state_carry_across_batches_and_a_restart(run, clock):
    runner = run(operator(clock))
    assert output(runner.batch(rows(("a", 1), ("a", 2), ("b", 1)))) == [
        ("a", 2, "[1, 2]", 2, -1),
        ("b", 1, "[1]", 1, -1),
    ]
    clock.now += 1
    assert output(runner.batch(rows(("a", 2)))) == [("a", 3, "[1, 2, 2]", 2, 2)]
    runner = run(operator(clock), runner.version)  # a new driver from the committed version
    clock.now += 1
    assert output(runner.batch(rows(("b", 7)))) == [("b", 2, "[1, 7]", 2, 1)]


def test_a_value_past_its_ttl_is_gone_and_timers_fire_once_when_due(run, clock):
    runner = run(operator(clock))
    runner.batch(rows(("a", 1)))  # timer at 1005 s, fresh written at 1000 s (TTL 3 s)
    clock.now += 4
    assert output(runner.batch(rows(("a", 1)))) == [("a", 2, "[1, 1]", 1, -1)]  # fresh expired
    clock.now += 2
    assert output(runner.batch(rows(("b", 1)))) == [("a", -2, "timer", 0, 0), ("b", 1, "[1]", 1, -1)]
    clock.now += 10
    assert output(runner.batch(rows())) == [("b", -1, "timer", 0, 0)]
    assert output(runner.batch(rows())) == []


def test_event_time_drops_late_rows_and_fires_timers_at_the_watermark(run, clock):
    class Window(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.total = handle.getValueState("total", "n long")

        def handleInputRows(self, key, rows, timerValues):
            frame = pd.concat(list(rows))
            self.total.update(((self.total.get() or (0,))[0] + int(frame["v"].sum()),))
            self.handle.registerTimer(int(frame["t"].max().timestamp() * 1000) + 10_000)
            return iter([])

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            yield pd.DataFrame(
                {"k": [key[0]], "n": [self.total.get()[0]], "at": [expiredTimerInfo.getExpiryTimeInMs()]}
            )

    op = StatefulProcessorOperator(
        Window(),
        ["k"],
        schema(k=T.StringType(), n=T.LongType(), at=T.LongType()),
        "EventTime",
        event_time="t",
        watermark_delay="0s",
        clock=clock,
    )
    runner = run(op)

    def events(*triples):
        return pa.table(
            {
                "k": [k for k, _, _ in triples],
                "t": pa.array([s * 1_000_000 for _, s, _ in triples], pa.timestamp("us")),
                "v": pa.array([v for _, _, v in triples], pa.int64()),
            }
        )

    assert runner.batch(events(("a", 5, 1), ("b", 30, 2))).output.num_rows == 0
    assert output(runner.operator.no_data_batch(runner.view)) == [("a", 1, 15_000)]  # watermark 30 s
    late = runner.batch(events(("a", 3, 100), ("a", 6, 4)))
    assert late.late_rows == 2 and late.output.num_rows == 0
    assert runner.batch(events(("b", 45, 5))).output.num_rows == 0  # evicts at 30 s: b's timer is at 40 s
    assert output(runner.operator.no_data_batch(runner.view)) == [("b", 7, 40_000)]


class LatestSeen(StatefulProcessor):
    """A value state with a timestamp field."""

    def init(self, handle) -> None:
        self.latest = handle.getValueState("latest", "at timestamp, n long")

    def handleInputRows(self, key, rows, timerValues):
        return iter([])

    def close(self) -> None:
        pass


def test_a_state_variable_with_a_timestamp_field_plans(spark):
    """Its Arrow schema needs a time zone (misa's tables hold timestamps in UTC): it failed at start before."""
    op = StatefulProcessorOperator(LatestSeen(), ["k"], schema(k=T.StringType()), "None")
    op.signature(schema(k=T.StringType(), v=T.LongType()))
    (latest,) = op._variables
    assert latest.value.field("at").type == pa.timestamp("us", tz="UTC")
