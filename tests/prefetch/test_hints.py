"""Hint extraction: extract_partition on Arrow batches, and hint_frame against Spark's own window()."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from prefetch.hints import (
    HINT_COUNT,
    HINT_HASH,
    HINT_HOT,
    HINT_TS,
    HINT_WINDOW_END,
    MAX_ROWS_PER_BATCH,
    HintSpec,
    extract_partition,
    hint_frame,
    hint_schema,
    validate,
)
from prefetch.sketch import CountMinSketch, hash_keys

S = 1_000_000


def batch(k: list, ts: list | None = None, s: list | None = None) -> pa.RecordBatch:
    columns = {"k": pa.array(k, pa.int64())}
    if s is not None:
        columns["s"] = pa.array(s, pa.string())
    if ts is not None:
        columns["t"] = pa.array(ts, pa.timestamp("us", "UTC"))
    return pa.record_batch(columns)


def extract(batches: list[pa.RecordBatch], spec: HintSpec, sketch: CountMinSketch | None = None) -> pa.Table:
    out = list(extract_partition(iter(batches), spec, sketch))
    return pa.Table.from_batches(out) if out else pa.table({})


def by_key(table: pa.Table, key: list[str]) -> dict[tuple, tuple[int, int]]:
    """{key: (max ts, count)}, failing on duplicate keys."""
    rows = table.to_pylist()
    result = {tuple(r[c] for c in key): (r[HINT_TS], r[HINT_COUNT]) for r in rows}
    assert len(result) == len(rows)
    return result


def test_an_integer_event_time_is_epoch_milliseconds() -> None:
    b = pa.record_batch({"k": pa.array([1, 1, 2]), "ms": pa.array([5, 9, 7], pa.int64())})
    assert by_key(extract([b], HintSpec(("k",), "ms")), ["k"]) == {(1,): (9000, 2), (2,): (7000, 1)}


def test_distinct_keys_with_max_event_time_and_counts() -> None:
    b = batch([1, 2, 1, None, 1, None], [5, 9, 7, 3, 6, 4], ["a", "b", "a", None, "z", None])
    out = extract([b], HintSpec(("k", "s"), "t"))
    assert out.column_names == ["k", "s", HINT_TS, HINT_COUNT, HINT_HASH, HINT_HOT]
    assert by_key(out, ["k", "s"]) == {(1, "a"): (7, 2), (2, "b"): (9, 1), (1, "z"): (6, 1), (None, None): (4, 2)}
    assert out.schema.field(HINT_HASH).type == pa.int64()
    expected_hash = hash_keys([out["k"], out["s"]]).view(np.int64)
    assert np.array_equal(out[HINT_HASH].to_numpy(), expected_hash)
    assert not any(out[HINT_HOT].to_pylist())


def test_without_event_time_ts_is_zero() -> None:
    out = extract([batch([3, 3, 4])], HintSpec(("k",)))
    assert by_key(out, ["k"]) == {(3,): (0, 2), (4,): (0, 1)}


def test_windowed_rows_go_to_every_window_containing_them() -> None:
    # window 3 s sliding by 1 s: t = 2.5 s is in [0, 3), [1, 4), [2, 5); t = 3 s in [1, 4), [2, 5), [3, 6)
    b = batch([7, 7, 8, 8], [2_500_000, 3 * S, None, 4 * S])
    out = extract([b], HintSpec(("k",), "t", 3 * S, 1 * S))
    assert by_key(out, [HINT_WINDOW_END, "k"]) == {
        (3 * S, 7): (2_500_000, 1),
        (4 * S, 7): (3 * S, 2),
        (5 * S, 7): (3 * S, 2),
        (6 * S, 7): (3 * S, 1),
        (5 * S, 8): (4 * S, 1),
        (6 * S, 8): (4 * S, 1),
        (7 * S, 8): (4 * S, 1),  # the null event time is dropped
    }
    tumbling = extract([b], HintSpec(("k",), "t", 2 * S))
    assert by_key(tumbling, [HINT_WINDOW_END, "k"]) == {(4 * S, 7): (3 * S, 2), (6 * S, 8): (4 * S, 1)}


def test_multi_batch_partitions_merge_to_the_same_result() -> None:
    rng = np.random.default_rng(1)
    k = rng.integers(0, 50, 5000).tolist()
    ts = rng.integers(0, 20 * S, 5000).tolist()
    whole = batch(k, ts)
    parts = [whole.slice(i, 700) for i in range(0, 5000, 700)] + [whole.slice(0, 0)]
    for spec in (HintSpec(("k",), "t"), HintSpec(("k",), "t", 5 * S, 2 * S)):
        key = ["k"] if not spec.windowed else [HINT_WINDOW_END, "k"]
        one, many = by_key(extract([whole], spec), key), by_key(extract(parts, spec), key)
        assert one == many
    counts = by_key(extract(parts, HintSpec(("k",), "t")), ["k"])
    assert sum(c for _, c in counts.values()) == 5000
    assert counts[(k[0],)][0] == max(t for kk, t in zip(k, ts) if kk == k[0])


def test_an_empty_partition_yields_nothing() -> None:
    assert list(extract_partition(iter([]), HintSpec(("k",)), None)) == []
    assert list(extract_partition(iter([batch([])]), HintSpec(("k",)), None)) == []


def test_hot_keys_are_flagged_from_the_sketch_snapshot() -> None:
    sketch = CountMinSketch(4, 1024, threshold=10, aging_records=10**9)
    hot_keys = pa.array([5, 6], pa.int64())
    sketch.add(hash_keys([hot_keys]), np.array([100, 11]))
    sketch.add(hash_keys([pa.array([7], pa.int64())]), np.array([10]))  # at the threshold: not hot
    out = extract([batch([5, 6, 7, 8, 5], [1, 2, 3, 4, 5])], HintSpec(("k",), "t"), sketch)
    flags = dict(zip(out["k"].to_pylist(), out[HINT_HOT].to_pylist()))
    assert flags == {5: True, 6: True, 7: False, 8: False}


def test_output_batches_hold_at_most_64k_rows() -> None:
    n = 150_000
    out = list(extract_partition(iter([batch(list(range(n)))]), HintSpec(("k",)), None))
    assert max(b.num_rows for b in out) <= MAX_ROWS_PER_BATCH
    assert sum(b.num_rows for b in out) == n


def test_spec_and_schema_validation() -> None:
    assert HintSpec(()).input_columns == []  # a state without group columns: one key (or one per window)
    with pytest.raises(ValueError, match="event_time"):
        HintSpec(("k",), window_us=S)
    with pytest.raises(ValueError, match="slide_us"):
        HintSpec(("k",), "t", window_us=S, slide_us=2 * S)
    with pytest.raises(ValueError, match="window_us"):
        HintSpec(("k",), "t", window_us=0)

    schema = StructType([StructField("k", LongType()), StructField("s", StringType())])
    validate(HintSpec(("k", "s")), schema)
    with pytest.raises(ValueError, match="'missing'"):
        validate(HintSpec(("k", "missing")), schema)
    with pytest.raises(ValueError, match="'s' must be a timestamp or an integer of epoch milliseconds"):
        validate(HintSpec(("k",), "s"), schema)
    validate(HintSpec(("s",), "k"), schema)  # an integer event time: epoch milliseconds
    assert hint_schema(schema, HintSpec(("s",))).fieldNames() == ["s", HINT_TS, HINT_COUNT, HINT_HASH, HINT_HOT]


# ---------------------------------------------------------------------------- against Spark


def _events(spark):
    rng = np.random.default_rng(11)
    n = 400
    times = rng.integers(-3 * S, 12 * S, n)
    times[:20] = np.arange(-2, 18) * 500_000  # exactly on window and slide boundaries
    rows = [
        (
            None if i % 37 == 0 else int(t),
            None if i % 23 == 0 else int(rng.integers(0, 6)),
            None if i % 29 == 0 else f"s{rng.integers(0, 3)}",
        )
        for i, t in enumerate(times)
    ]
    df = spark.createDataFrame(rows, "t long, k long, s string").repartition(3)
    return df.withColumn("event_time", F.timestamp_micros("t"))


def _driver_merge(table: pa.Table, key: list[str]) -> dict[tuple, tuple[int, int]]:
    """Merge the partitions' hint rows (a key may come from several partitions)."""
    merged = table.group_by(key).aggregate([(HINT_TS, "max"), (HINT_COUNT, "sum")])
    return {tuple(r[c] for c in key): (r[f"{HINT_TS}_max"], r[f"{HINT_COUNT}_sum"]) for r in merged.to_pylist()}


@pytest.mark.parametrize(
    "window, window_us, slide, slide_us",
    [
        ("3 seconds", 3 * S, None, None),
        ("3 seconds", 3 * S, "1 second", S),
        ("2500 milliseconds", 2_500_000, "1 second", S),
        ("30 seconds", 30 * S, "1 second", S),
    ],
)
def test_windowed_hints_match_spark_window(
    spark, window: str, window_us: int, slide: str | None, slide_us: int | None
) -> None:
    df = _events(spark)
    spec = HintSpec(("k", "s"), "event_time", window_us, slide_us)

    hints = hint_frame(df, spec, None).toArrow()
    assert hints.num_rows > 0
    ours = _driver_merge(hints, [HINT_WINDOW_END, "k", "s"])

    w = F.window("event_time", window, slide) if slide else F.window("event_time", window)
    reference = (
        df.groupBy(w.alias("w"), "k", "s")
        .agg(F.max(F.unix_micros("event_time")).alias("ts"), F.count("*").alias("n"))
        .select(F.unix_micros("w.end").alias("end"), "k", "s", "ts", "n")
        .collect()
    )
    assert ours == {(r.end, r.k, r.s): (r.ts, r.n) for r in reference}


def test_unwindowed_hints_match_spark_group_by(spark) -> None:
    df = _events(spark)
    sketch = CountMinSketch(4, 1024, threshold=3, aging_records=10**9)
    frame = hint_frame(df, HintSpec(("k",), "event_time"), sketch)
    sketch.add(hash_keys([pa.array([1, 2], pa.int64())]), np.array([200, 200]))  # after the snapshot: no effect
    hints = frame.toArrow()
    assert not any(hints[HINT_HOT].to_pylist())
    reference = (
        df.groupBy("k")
        .agg(F.coalesce(F.max(F.unix_micros("event_time")), F.lit(0)).alias("ts"), F.count("*").alias("n"))
        .collect()
    )
    assert _driver_merge(hints, ["k"]) == {(r.k,): (r.ts, r.n) for r in reference}

    hot = hint_frame(df, HintSpec(("k",), "event_time"), sketch).toArrow()
    flagged = {k for k, h in zip(hot["k"].to_pylist(), hot[HINT_HOT].to_pylist()) if h}
    assert flagged == {1, 2}


def test_without_key_columns_every_row_counts_towards_the_one_key(spark) -> None:
    """Spark hands a projection of no columns to mapInArrow as batches of no rows: the rows must still count."""
    rows = spark.range(10).withColumn("t", F.timestamp_micros("id"))
    unwindowed = hint_frame(rows, HintSpec(()), None).toArrow()
    assert sum(unwindowed[HINT_COUNT].to_pylist()) == 10 and len(set(unwindowed[HINT_HASH].to_pylist())) == 1
    windowed = hint_frame(rows, HintSpec((), "t", 5, 5), None).toArrow()
    assert sorted(windowed[HINT_WINDOW_END].to_pylist()) == [5, 10] and sum(windowed[HINT_COUNT].to_pylist()) == 10


def test_key_counts_of_rows_split_by_key_merge_to_those_of_all_rows():
    """What the sketch counts of hint rows is the same whether the driver holds them all or each state host counts
    its share (a key's windows may be split between hosts: the largest window's records win)."""
    from prefetch.hints import HINT_COUNT, HINT_HASH, HINT_WINDOW_END, key_counts, merged_key_counts

    table = pa.table(
        {
            HINT_WINDOW_END: [10, 10, 20, 10, 20, 30],
            HINT_HASH: [1, 1, 1, 2, 2, -3],  # a negative int64 is a uint64 hash above 2**63
            HINT_COUNT: [3, 2, 4, 7, 1, 5],
        }
    )
    whole = dict(zip(*[a.tolist() for a in key_counts(table)]))
    assert whole == {1: 5, 2: 7, 2**64 - 3: 5}  # key 1: max(3 + 2, 4)
    parts = [key_counts(table.take([0, 1, 3])), key_counts(table.take([2, 4, 5]))]
    assert dict(zip(*[a.tolist() for a in merged_key_counts(parts)])) == whole
    assert [len(a) for a in merged_key_counts([])] == [0, 0]
