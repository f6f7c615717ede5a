"""The filters Spark's optimizer moves below withWatermark from the whole query reach misa's source plan
(misa.query.pushdown): read from the plans, no stream started."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from misa.exceptions import UnsupportedQueryError
from misa.query.job import planned

SCHEMA = "t timestamp, k int, v bigint"


def watermarked(spark: SparkSession, path) -> DataFrame:
    path.mkdir()
    return spark.readStream.schema(SCHEMA).json(str(path)).withWatermark("t", "5 seconds")


def events(spark: SparkSession, path, prefix: str) -> DataFrame:
    rows = watermarked(spark, path)
    return rows.select(F.col("k").alias(f"{prefix}k"), F.col("t").alias(f"{prefix}t"), "v")


def below_watermarks(source: DataFrame) -> list[str]:
    """The SQL of each filter under a withWatermark node in ``source``'s analyzed plan, one string per node."""
    found: list[str] = []

    def walk(node, under: bool) -> None:
        kind = str(node.getClass().getSimpleName())
        if under and kind == "Filter":
            found.append(str(node.condition().sql()))
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i), under or kind == "EventTimeWatermark")

    walk(source._jdf.queryExecution().analyzed(), False)
    return found


def test_a_joins_keys_and_inferred_constraints_filter_each_side_below_its_watermark(spark, tmp_path):
    left = events(spark, tmp_path / "a", "l").where(F.col("lk") >= 1)
    right = events(spark, tmp_path / "b", "r")
    query = left.join(right, F.expr("lk = rk AND rt >= lt AND rt <= lt + interval 1 minute"))
    _, source, _ = planned(query, "append", lambda batch_id, table: None)
    filters = " | ".join(below_watermarks(source))
    assert filters.count("(k IS NOT NULL)") == 2, filters  # each side's key, as the join infers it
    assert filters.count("(k >= 1)") == 2, filters  # the left's filter, and the same inferred for the right


def test_a_filter_on_a_group_key_above_the_aggregation_filters_below_the_watermark(spark, tmp_path):
    rows = watermarked(spark, tmp_path / "a")
    query = rows.groupBy(F.window("t", "10 seconds"), "k").count().where("k > 0")
    _, source, _ = planned(query, "append", lambda batch_id, table: None)
    assert any("(k > 0)" in sql for sql in below_watermarks(source)), below_watermarks(source)


def test_without_a_filter_from_above_the_source_plan_keeps_its_own(spark, tmp_path):
    rows = watermarked(spark, tmp_path / "a")
    query = rows.groupBy(F.window("t", "10 seconds"), "k").count()
    _, source, _ = planned(query, "append", lambda batch_id, table: None)
    assert below_watermarks(source) == []


def decoded(spark: SparkSession, path, prefix: str) -> DataFrame:
    """JSON lines read as text and decoded with ``from_json`` (as a Kafka query decodes its values), watermarked."""
    path.mkdir()
    rows = spark.readStream.text(str(path)).select(F.from_json("value", SCHEMA).alias("j")).select("j.*")
    rows = rows.withWatermark("t", "5 seconds")
    return rows.select(F.col("k").alias(f"{prefix}k"), F.col("t").alias(f"{prefix}t"), "v")


def decoded_join(spark: SparkSession, tmp_path, both_sides: bool):
    """Two streams of JSON decoded with from_json joined on the key, the left filtered on it (and the right too)."""
    left = decoded(spark, tmp_path / "a", "l").where(F.col("lk") >= 1)
    right = decoded(spark, tmp_path / "b", "r")
    if both_sides:
        right = right.where(F.col("rk") >= 1)
    return left.join(right, F.expr("lk = rk AND rt >= lt - interval 4 seconds AND rt <= lt + interval 4 seconds"))


def test_a_filter_spark_infers_only_in_batches_where_the_other_side_has_no_input_is_refused(spark, tmp_path):
    """Spark does not infer the left's filter on a from_json key for the right side in the whole plan, but does in a
    batch whose left source has no new input: its watermark then depends on which streams had input (misa fuzz
    --deployments seed 20124, on Kafka)."""
    with pytest.raises(UnsupportedQueryError, match="only in the batches where .* has no new input") as refused:
        planned(decoded_join(spark, tmp_path, both_sides=False), "append", lambda batch_id, table: None)
    assert ">= 1" in str(refused.value) and "write that filter on this stream yourself" in str(refused.value)


def test_the_filter_written_on_both_sides_of_the_join_is_planned(spark, tmp_path):
    _, source, _ = planned(decoded_join(spark, tmp_path, both_sides=True), "append", lambda batch_id, table: None)
    assert sum(">= 1" in sql for sql in below_watermarks(source)) == 2, below_watermarks(source)
