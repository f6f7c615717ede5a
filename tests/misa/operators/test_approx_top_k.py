"""misa's port of the frequent-items sketch behind Spark's approx_top_k (misa.operators.frequent_items) against Spark's
own: the port's sketch of a column's rows is Spark's image byte for byte for every item type Spark takes (Java's hash
of each, its serializer, its purges when the rows overflow the map), the merges repeat a Spark streaming query's
buffers batch by batch, a null item takes its place by its count, and sketches of two sizes fail to combine as in
Spark."""

from __future__ import annotations

import datetime as dt
import os
import random
import struct
from decimal import Decimal

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.operators import approx_top_k
from misa.operators.approx_top_k import ApproxTopKMergeError, lg_map_size
from misa.operators.frequent_items import FrequentItems
from misa.operators.java_items import float_item, item_type

RNG = random.Random(63)
TEXT = ["a", "bb", "é", "日本", "", " x", "ß"]
ROWS = {  # type -> (values, maxItemsTracked); 3 nulls are added to each
    "int": ([RNG.randint(0, 40) for _ in range(300)], 10000),
    "int overflowing its map": ([RNG.randint(0, 400) for _ in range(3000)], 20),
    "string": ([RNG.choice(TEXT) + str(RNG.randint(0, 30)) for _ in range(500)], 10000),
    "bigint": ([RNG.randint(-(2**40), 2**40) % 97 * 10**11 for _ in range(400)], 50),
    "double": ([RNG.choice([0.0, -0.0, 1.5, float("nan"), 2.25, 1e300, -3.0]) for _ in range(100)], 10000),
    "float": ([RNG.choice([0.0, -0.0, 1.5, float("nan"), 2.25, -3.0, 0.1]) for _ in range(100)], 10000),
    "boolean": ([RNG.random() < 0.3 for _ in range(50)], 10000),
    "tinyint": ([RNG.randint(-128, 127) for _ in range(400)], 10000),
    "smallint": ([RNG.randint(-300, 300) for _ in range(400)], 10000),
    "date": ([dt.date(2020, 1, 1) + dt.timedelta(days=RNG.randint(0, 50)) for _ in range(300)], 10000),
    "timestamp_ntz": ([dt.datetime(2020, 1, 1, 0, 0, RNG.randint(0, 59)) for _ in range(300)], 10000),
    "decimal(7,2)": ([Decimal(RNG.randint(-5000, 5000)).scaleb(-2) for _ in range(300)], 10000),
    "decimal(15,3)": ([Decimal(RNG.randint(-50000, 50000)).scaleb(-3) for _ in range(300)], 10000),
    "decimal(30,4)": (
        [
            Decimal(RNG.choice([RNG.randint(-50000, 50000), RNG.randint(-(10**25), 10**25)])).scaleb(-4)
            for _ in range(300)
        ],
        10000,
    ),
}


def _item(value, name: str):
    """A row's value as the port holds it (Spark's internal form)."""
    if name in ("float", "double"):
        return float_item(value, name == "double")
    if name == "date":
        return (value - dt.date(1970, 1, 1)).days
    if name == "timestamp_ntz":
        return (value - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
    if name.startswith("decimal"):
        return int(value.scaleb(int(name.split(",")[1][:-1])))
    return value


@pytest.mark.parametrize("case", list(ROWS))
def test_the_ports_sketch_of_a_columns_rows_is_sparks_image(spark, case):
    name = case.split()[0]
    values, size = ROWS[case]
    schema = T.StructType([T.StructField("x", T._parse_datatype_string(name))])
    rows = spark.createDataFrame([(v,) for v in [*values, None, None, None]], schema).coalesce(1)  # one buffer
    state = rows.agg(F.expr(f"approx_top_k_accumulate(x, {size})").alias("a")).first().a
    items = item_type(state.itemDataTypeDDL)
    sketch = FrequentItems(items, lg_map_size(size))
    for value in values:
        sketch.update(_item(value, name))
    assert sketch.to_bytes() + struct.pack(">q", 3) == bytes(state.sketch)
    restored = FrequentItems.from_bytes(items, bytes(state.sketch)[:-8])  # an empty image keeps no weight, as Java's
    assert (restored.weight, restored.offset) == ((len(values), sketch.offset) if sketch.map.active else (0, 0))


def test_the_merges_repeat_a_spark_streaming_querys_buffers(spark, tmp_path):
    """Spark's state of each batch is its buffer merged into a fresh one with the stored one before it; its output is
    that buffer merged into a fresh one again: misa's merge and result give Spark's bytes for each batch."""
    rng = random.Random(7)
    batches = [[(rng.randint(0, 1), rng.randint(0, 25)) for _ in range(60)] for _ in range(3)]
    for i, batch in enumerate(batches):
        (tmp_path / "in").mkdir(exist_ok=True)
        path = tmp_path / "in" / f"{i}.csv"
        path.write_text("".join(f"{g},{x}\n" for g, x in batch))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # one file a batch, in this order
    outputs: list[tuple[int, int, dict]] = []
    query = (
        spark.readStream.schema("g int, x int")
        .option("maxFilesPerTrigger", 1)
        .csv(str(tmp_path / "in"))
        .groupBy("g")
        .agg(F.expr("approx_top_k_accumulate(x, 100)").alias("a"))
        .writeStream.outputMode("update")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .foreachBatch(lambda df, b: outputs.extend((b, r.g, r.a.asDict()) for r in df.collect()))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    stored: dict[int, dict] = {}
    for batch_id, batch in enumerate(batches):
        for g in sorted({g for g, _ in batch}):
            partial = spark.createDataFrame([(x,) for k, x in batch if k == g], "x int").coalesce(1)
            partial = partial.agg(F.expr("approx_top_k_accumulate(x, 100)").alias("a")).first().a.asDict()
            partial["sketch"] = bytes(approx_top_k.merge("approx_top_k_accumulate", (100,), None, partial)["sketch"])
            stored[g] = approx_top_k.merge("approx_top_k_accumulate", (100,), stored.get(g), partial)
            spark_output = next(a for b, k, a in outputs if (b, k) == (batch_id, g))
            mine = approx_top_k.result("approx_top_k_accumulate", (100,), stored[g])
            assert bytes(spark_output["sketch"]) == mine["sketch"], (batch_id, g)


def test_a_null_item_comes_in_by_its_count_as_in_spark(spark):
    rows = [5] * 6 + [None] * 4 + [7] * 3 + [9] * 2 + [None] * 0 + [11]
    frame = spark.createDataFrame([(v,) for v in rows], "x int").coalesce(1)
    state = frame.agg(F.expr("approx_top_k_accumulate(x, 50)").alias("a")).first().a.asDict()
    state["sketch"] = bytes(state["sketch"])
    for k in (1, 2, 3, 5, 10):
        spark_top = frame.agg(F.expr(f"approx_top_k(x, {k}, 50)").alias("t")).first().t
        mine = approx_top_k.result("approx_top_k", (k, 50), state)
        assert mine == [r.asDict() for r in spark_top], k


def test_sketches_of_two_sizes_fail_to_combine_as_in_spark(spark):
    accumulations = [f"SELECT approx_top_k_accumulate(x, {size}) a FROM VALUES ({size}) t(x)" for size in (10, 20)]
    with pytest.raises(Exception, match="APPROX_TOP_K_SKETCH_SIZE_NOT_MATCH"):
        spark.sql(f"SELECT approx_top_k_combine(a) FROM ({' UNION ALL '.join(accumulations)})").collect()
    combined = [_state(spark, f"SELECT approx_top_k_combine(a) FROM ({a})") for a in accumulations]
    stored = approx_top_k.merge("approx_top_k_combine", (-1,), None, combined[0])
    with pytest.raises(ApproxTopKMergeError, match="APPROX_TOP_K_SKETCH_SIZE_NOT_MATCH"):
        approx_top_k.merge("approx_top_k_combine", (-1,), stored, combined[1])
    sized = [_state(spark, f"SELECT approx_top_k_combine(a, 30) FROM ({a})") for a in accumulations]
    merged = approx_top_k.merge("approx_top_k_combine", (30,), sized[0], sized[1])
    spark_merged = _state(spark, f"SELECT approx_top_k_combine(a, 30) FROM ({' UNION ALL '.join(accumulations)})")
    assert merged["maxItemsTracked"] == spark_merged["maxItemsTracked"] == 30
    top = [approx_top_k.result("approx_top_k", (5, 30), s) for s in (merged, spark_merged)]
    assert sorted(r["item"] for r in top[0]) == sorted(r["item"] for r in top[1]) == [10, 20]


def _state(spark, sql: str) -> dict:
    """The state struct of a query's one aggregate, its sketch as bytes."""
    state = spark.sql(sql).first()[0].asDict()
    return {**state, "sketch": bytes(state["sketch"])}
