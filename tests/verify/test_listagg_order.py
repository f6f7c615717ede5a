"""An ordered ``listagg`` as misa computes it (each value collected with its order keys, Spark's projection sorting
them: misa.query.aggregates) equals Spark's own over the same rows read in the same order: directions, nulls first
and last, several keys, ties kept in reading order, null values skipped, binary values."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from misa.query.aggregates import listagg_element, listagg_sql
from misa.query.plan import read_plan

ROWS = [
    ("a", "x1", 2, 1.0),
    ("a", "x2", None, 5.0),
    ("a", "x3", 2, 1.0),  # a tie with x1 on both keys: reading order
    ("a", None, 1, 0.0),  # no value: skipped
    ("a", "x5", 1, float("nan")),
    ("a", "x6", 3, -0.0),
    ("a", "x7", 3, 0.0),  # -0.0 and 0.0 tie
    ("b", None, 1, 1.0),  # no value at all: null
]
ORDERS = [
    "o",
    "o DESC",
    "o NULLS LAST, p DESC",
    "o DESC NULLS FIRST, p",
    "p DESC NULLS LAST, o",
]


def _misa_listagg(spark, rows, sql: str):
    """What misa's column and projection give for ``sql`` (a listagg) over ``rows`` grouped by ``k``."""
    aggregate = next(
        e
        for e in read_plan(rows.groupBy("k").agg(F.expr(sql))).fields["aggregates"][1].walk()
        if e.kind == "AggregateExpression"
    )
    function = aggregate.children[0]
    collected = rows.groupBy("k").agg(F.collect_list(F.expr(listagg_element(function))).alias("c"))
    return sorted(tuple(r) for r in collected.select("k", F.expr(listagg_sql("c", aggregate))).collect())


@pytest.mark.parametrize("order", [o if o == ORDERS[2] else pytest.param(o, marks=pytest.mark.slow) for o in ORDERS])
def test_ordered_listagg_is_sparks(spark, order):
    rows = spark.createDataFrame(ROWS, "k string, v string, o int, p double").coalesce(1)
    sql = f"listagg(v, ',') WITHIN GROUP (ORDER BY {order})"
    expected = sorted(tuple(r) for r in rows.groupBy("k").agg(F.expr(sql)).collect())
    assert _misa_listagg(spark, rows, sql) == expected


def test_ordered_listagg_of_binary_values_is_sparks(spark):
    rows = spark.createDataFrame(ROWS, "k string, v string, o int, p double").coalesce(1)
    rows = rows.withColumn("v", F.col("v").cast("binary"))
    sql = "listagg(v, X'2c') WITHIN GROUP (ORDER BY o DESC, p)"
    expected = sorted(tuple(r) for r in rows.groupBy("k").agg(F.expr(sql)).collect())
    assert _misa_listagg(spark, rows, sql) == expected
