"""Nested types in a query's aggregates, through misa.from_query and through plain Spark, compared batch id by batch
id (verify/differential/scenarios.py). Spark's SQL text of a cast to an array, a map or a struct leaves the cast out;
misa, which runs an aggregate's argument, an expression over aggregates and a step above the node as SQL read from
the plan, computed the uncast value there (vector_sum of doubles failed; collect_list gave strings, a struct kept its
field names). And aggregates of a struct whose fields Spark types non-nullable (a literal's, vector_sum's): a batch's
deltas hold a null struct in the row of its latest event time, which PySpark's Arrow conversion refused or (a
literal's field) turned null."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from verify.differential.scenarios import Round, Scenario, run_scenario

SCHEMA = "t timestamp, k int, v bigint, a array<string>"


def _rows(*events: tuple[int, int, list[str] | None]) -> tuple[dict, ...]:
    return tuple({"t": f"2024-01-01T00:00:{s:02d}", "k": k, "v": s, "a": a} for s, k, a in events)


def _files(spark: SparkSession, inputs: Path) -> DataFrame:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inputs / "in"))


def _aggregated(spark: SparkSession, inputs: Path) -> DataFrame:
    # a filter on the event time after the watermark: misa's deltas then carry a row of the batch's latest time
    rows = _files(spark, inputs).withWatermark("t", "5 seconds").where(F.second("t") != 59)
    vector = F.array(F.col("v"), F.col("v") * 2).cast("array<float>")
    return (
        rows.groupBy(F.window("t", "10 seconds"), "k")
        .agg(
            F.collect_list(F.col("a").cast("array<int>")).alias("numbers"),
            F.call_function("vector_sum", vector).alias("sums"),
            F.max_by(F.struct("v", "k").cast("struct<value: string, key: bigint>"), "v").alias("largest"),
            F.max_by(F.struct(F.lit("x").alias("tag"), "v"), "v").alias("last"),
            F.count("*").alias("n"),
        )
        .select(
            "window", "k", "numbers", "sums", "last", F.col("largest").cast("struct<x: string, y: string>").alias("big")
        )
    )


ROUNDS = (
    Round(files=(("in/0.json", _rows((1, 1, ["1", "02"]), (2, 1, ["3"]), (3, 2, None))),)),
    Round(files=(("in/1.json", _rows((4, 1, ["10", "007"]), (21, 2, []))),)),
)


def test_casts_to_arrays_and_structs_and_structs_of_literals_give_sparks_rows(spark, tmp_path: Path):
    outcome = run_scenario(spark, Scenario("nested types", _aggregated, "update", ROUNDS), tmp_path)
    assert outcome.ok, outcome
