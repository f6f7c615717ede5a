"""TopN (NEXMark Q18/Q19) with a key of every type (nulls, -0.0, NaN, extremes included) and prefetching on, off and
auto, through the runtime over a file source: its last rows per key equal Spark's top rows over all the input."""

from __future__ import annotations

import json
import math
import os

import pyarrow as pa
import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

from misa import MisaConfig, StatefulJob, TopN
from verify.differential.cases import KEY_TYPES, PREFETCHING, Query, Settings, case_of

KEYS = [f"k_{t}" for t in KEY_TYPES]


def _key(row: dict) -> tuple:
    return tuple(
        "NaN" if isinstance(v, float) and math.isnan(v) else (v + 0.0 if isinstance(v, float) else v)
        for v in (row[k] for k in KEYS)
    )


@pytest.mark.parametrize(
    "prefetching", [p if p == "true" else pytest.param(p, marks=pytest.mark.slow) for p in PREFETCHING]
)
@pytest.mark.slow  # the suite's time (each Python source adds ~1.5 s to a query's start)
def test_top_rows_per_key_of_every_type_equal_sparks(spark, tmp_path, prefetching):
    case = case_of(Query("global", {k: t for k, t in zip(KEYS, KEY_TYPES)}, value_type="bigint"), Settings(), seed=5)
    source = tmp_path / "in"
    source.mkdir()
    for i, rows in enumerate(f for r in case.rounds for f in r):
        (source / f"{i:03d}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
        os.utime(source / f"{i:03d}.json", (1_000_000 + i, 1_000_000 + i))
    stream = spark.readStream.schema(case.schema()).option("maxFilesPerTrigger", 1).json(str(source))
    outputs: dict[int, pa.Table] = {}
    config = MisaConfig.from_mapping({"spark.misa.prefetch.enabled": prefetching, "spark.misa.cache.maxBytes": "4096"})
    top = TopN(KEYS, ["v", "t"], [("v", "descending"), ("t", "ascending")], n=1, time_column="t")
    job = StatefulJob(top, outputs.__setitem__, str(tmp_path / "ckpt"), config=config, echo=None)
    try:
        job.start(spark, stream, {"availableNow": True}).awaitTermination()
    finally:
        job.close(spark)
    got = {}
    for batch in sorted(outputs):
        got |= {_key(row): (row["v"], row["t"]) for row in outputs[batch].to_pylist()}
    rows = spark.read.schema(case.schema()).json(str(source))
    order = Window.partitionBy(*KEYS).orderBy(F.col("v").desc_nulls_last(), F.col("t").asc_nulls_last())
    first = rows.withColumn("_r", F.row_number().over(order)).where("_r = 1").toArrow().to_pylist()
    expected = {_key(row): (row["v"], row["t"]) for row in first}
    assert len(expected) > 5 and got == expected
