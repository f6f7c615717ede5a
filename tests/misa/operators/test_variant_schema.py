"""misa's merge of schema_of_variant_agg's schemas (misa.operators.variant_schema) against Spark's: a streaming query's
schema of each group after two batches is misa's merge of Spark's schemas of each batch's rows, over objects, arrays,
numbers of every kind, names needing quotes and names differing in case only; Spark's printed schemas read back."""

from __future__ import annotations

import json
import os
import random

from pyspark.sql import functions as F

from misa.operators.variant_schema import merge, merge_printed, parse, printed
from verify.differential.queries import CASED_DOCS, VARIANT_DOCS

DOCS = (*VARIANT_DOCS, *CASED_DOCS, '{"a": 1e-7}', '{"a": [{"x": 1}, {"y": "z"}]}', '{"``": {"`": []}}')


def test_a_streaming_querys_schema_after_two_batches_is_the_merge_of_each_batchs(spark, tmp_path):
    rng = random.Random(63)
    groups = range(60)
    batches = [[(g, rng.choice(DOCS)) for g in groups for _ in range(rng.randint(1, 3))] for _ in range(2)]
    (tmp_path / "in").mkdir()
    for i, rows in enumerate(batches):
        path = tmp_path / "in" / f"{i}.json"
        path.write_text("".join(json.dumps({"g": g, "j": j}) + "\n" for g, j in rows))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # one file a batch, in this order
    outputs: dict[tuple[int, int], str] = {}
    query = (
        spark.readStream.schema("g int, j string")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
        .groupBy("g")
        .agg(F.schema_of_variant_agg(F.parse_json("j")).alias("s"))
        .writeStream.outputMode("update")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .foreachBatch(lambda df, b: outputs.update(((b, r.g), r.s) for r in df.collect()))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    schemas = []
    for i in range(2):
        batch = spark.read.schema("g int, j string").json(str(tmp_path / "in" / f"{i}.json"))
        rows = batch.groupBy("g").agg(F.schema_of_variant_agg(F.parse_json("j")).alias("s")).collect()
        schemas.append({r.g: r.s for r in rows})
    for g in groups:
        assert merge_printed(schemas[0][g], schemas[1][g]) == outputs[(1, g)], g
        assert printed(parse(outputs[(1, g)])) == outputs[(1, g)]


def test_spark_merges_numbers_decimals_and_objects_as_it_infers_json(spark):
    pairs = [  # two variants, merged as Spark's one buffer of both merges them
        ('{"a": 1}', '{"a": 1.25}'),  # a long and a decimal: the decimal widened to hold a long
        ('{"a": 12345678901234567890123}', '{"a": 0.000001}'),  # past 38 digits: a double
        ('{"a": 1e300}', '{"a": 1.5}'),  # a double and a decimal: a double
        ('{"a": "x"}', '{"a": 1}'),  # no common type: a variant
        ("[1, 2]", '[{"a": 1}]'),
        ('{"A": 1}', '{"a": 2}'),  # one field each, its name differing in case only, one type: one field
        ('{"A": 1}', '{"a": 2.5}'),  # the same, of two types: two fields
        ('{"A": 1, "b": 2}', '{"a": 2.5}'),  # fields of two objects merged by name
        ("null", '{"a": []}'),
    ]
    for a, b in pairs:
        both = spark.createDataFrame([(a,), (b,)], "j string").coalesce(1)
        spark_schema = both.agg(F.schema_of_variant_agg(F.parse_json("j"))).first()[0]
        each = [spark.range(1).select(F.schema_of_variant(F.parse_json(F.lit(d)))).first()[0] for d in (a, b)]
        assert printed(merge(parse(each[0]), parse(each[1]))) == spark_schema, (a, b)
