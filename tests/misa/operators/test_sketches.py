"""misa's merges of Spark's sketch aggregates (misa.operators.sketches): Spark's sketch of one half of a group's rows
merged with its sketch of the other half is Spark's sketch of all of them (the bytes of the count-min and Theta
sketches and the bitmaps; what a HyperLogLog, KLL or tuple sketch holds), Spark reads the merged images, and
sketches that cannot merge fail as Spark fails."""

from __future__ import annotations

import datasketches as ds
import pytest
from pyspark.sql import functions as F

from misa.operators.sketches import Sketch, SketchMergeError
from verify.differential.sketch_values import sketch_summary
from verify.output_diff import canonical

# Spark's documented example: count_min_sketch(col, 0.5d, 0.5d, 1) over 1, 2, 1
SPARK_EXAMPLE = bytes.fromhex(
    "0000000100000000000000030000000100000004000000005D8D6AB9"
    "0000000000000000000000000000000200000000000000010000000000000000"
)
CMS = Sketch("count_min_sketch", (0.5, 0.5, 1))
SKETCHES = {  # output name -> (the sketch, its column[, a tuple sketch's summary column])
    "hll_sketch_agg_12": (Sketch("hll_sketch_agg", (12,)), "i"),
    "hll_sketch_agg_4_of_strings": (Sketch("hll_sketch_agg", (4,)), "s"),
    "theta_sketch_agg_12": (Sketch("theta_sketch_agg", (12,)), "i"),
    "theta_sketch_agg_5_of_doubles": (Sketch("theta_sketch_agg", (5,)), "x"),
    "kll_sketch_agg_bigint": (Sketch("kll_sketch_agg_bigint", (400,)), "i"),  # exact: every item kept
    "kll_sketch_agg_double": (Sketch("kll_sketch_agg_double", (200,)), "x"),  # compacted, at random
    "kll_sketch_agg_float": (Sketch("kll_sketch_agg_float", (50,)), "f"),
    "count_min_sketch_of_strings": (Sketch("count_min_sketch", (0.01, 0.95, 3)), "s"),
    "count_min_sketch": (Sketch("count_min_sketch", (0.2, 0.9, 7)), "i"),
    "tuple_sketch_agg_double_sum": (Sketch("tuple_sketch_agg_double", (12, "sum")), "s", "x"),
    "tuple_sketch_agg_integer_max": (Sketch("tuple_sketch_agg_integer", (12, "MAX")), "i", "n"),
    "tuple_sketch_agg_double_min_5": (Sketch("tuple_sketch_agg_double", (5, "min")), "x", "x"),
    "tuple_sketch_agg_integer_alwaysone": (Sketch("tuple_sketch_agg_integer", (12, "alwaysone")), "s", "n"),
    "bitmap_construct_agg": (Sketch("bitmap_construct_agg"), "position"),
    "bitmap_or_agg": (Sketch("bitmap_or_agg"), "bytes"),
    "bitmap_and_agg": (Sketch("bitmap_and_agg"), "bytes"),
}


def _cms(counts: list[int]) -> bytes:
    """An image of the example's sketch (depth 1, width 4, its hash seed) holding ``counts``."""
    table = b"".join(c.to_bytes(8, "big") for c in counts)
    return SPARK_EXAMPLE[:4] + sum(counts).to_bytes(8, "big") + SPARK_EXAMPLE[12:28] + table


def test_a_count_min_merge_gives_sparks_documented_sketch():
    ones_and_twos, one = _cms([0, 1, 1, 0]), _cms([0, 1, 0, 0])
    assert CMS.merge(ones_and_twos, one) == SPARK_EXAMPLE
    assert CMS.merge(None, one) == one and CMS.merge(one, None) == one


def test_count_min_sketches_of_other_seeds_do_not_merge():
    other = bytearray(_cms([0, 1, 0, 0]))
    other[24] ^= 1  # another hash seed
    with pytest.raises(SketchMergeError, match="IncompatibleMergeException"):
        CMS.merge(_cms([0, 1, 1, 0]), bytes(other))


def test_hll_unions_of_two_lg_config_k_fail_as_sparks_unless_allowed():
    small, large = ds.hll_sketch(10, ds.HLL_8), ds.hll_sketch(12, ds.HLL_8)
    small.update(1)
    large.update(2)
    images = small.serialize_updatable(), large.serialize_updatable()
    with pytest.raises(SketchMergeError, match="HLL_UNION_DIFFERENT_LG_K"):
        Sketch("hll_union_agg", (False,)).merge(*images)
    merged = ds.hll_sketch.deserialize(Sketch("hll_union_agg", (True,)).merge(*images))
    assert round(merged.get_estimate()) == 2


def test_sketches_of_two_halves_merged_are_sparks_sketch_of_all_rows(spark):
    rows = [(i < 150, i * 7 % 400, f"s{i % 90}", i / 3, float(i % 40), i % 11 - 5) for i in range(300)]
    rows.append((True, None, None, None, None, None))
    schema = "first boolean, i bigint, s string, x double, f float, n int"
    frame = spark.createDataFrame(rows, schema).repartition(3)
    frame = frame.withColumns({"position": F.bitmap_bit_position("i"), "bytes": F.unhex(F.hex(F.col("i") % 7 + 248))})
    aggregates = [s.partial(*map(F.col, columns)).alias(name) for name, (s, *columns) in SKETCHES.items()]
    halves = {r["first"]: r for r in frame.groupBy("first").agg(*aggregates).collect()}
    whole = frame.agg(*aggregates).collect()[0]
    merged = {
        name: s.merge(bytes(halves[True][name]), bytes(halves[False][name])) for name, (s, *_) in SKETCHES.items()
    }
    for name in SKETCHES:
        expected = bytes(whole[name])
        if name.startswith(("count_min", "theta", "bitmap")):
            assert merged[name] == expected, name
        else:
            # as the differential test compares them: a tuple sketch's double sums added in another order
            assert canonical(sketch_summary(name, merged[name])) == canonical(sketch_summary(name, expected)), name
    images = [merged, {name: bytes(whole[name]) for name in SKETCHES}]
    read = spark.createDataFrame([tuple(i.values()) for i in images], ", ".join(f"{n} binary" for n in merged)).select(
        F.hll_sketch_estimate("hll_sketch_agg_12"),
        F.theta_sketch_estimate("theta_sketch_agg_12"),
        F.kll_sketch_get_n_bigint("kll_sketch_agg_bigint"),
        F.kll_sketch_get_quantile_bigint("kll_sketch_agg_bigint", F.lit(0.5)),
        F.kll_sketch_get_n_double("kll_sketch_agg_double"),
        F.tuple_sketch_estimate_double("tuple_sketch_agg_double_sum"),
        F.tuple_sketch_summary_double("tuple_sketch_agg_double_sum"),
        F.tuple_sketch_summary_integer("tuple_sketch_agg_integer_max", F.lit("max")),
        F.tuple_sketch_estimate_double("tuple_sketch_agg_double_min_5"),
    )
    ours, sparks = (tuple(r) for r in read.collect())
    assert ours == sparks and ours[2] == ours[4] == 300


def test_theta_intersections_of_two_halves_are_sparks(spark):
    rows = [(i % 2 == 0, i % 3, i % 50) for i in range(200)]
    frame = spark.createDataFrame(rows, "half boolean, g int, v bigint").repartition(2)
    per_group = frame.groupBy("half", "g").agg(F.theta_sketch_agg("v").alias("t"))
    halves = {
        r["half"]: bytes(r["t"])
        for r in per_group.groupBy("half").agg(F.theta_intersection_agg("t").alias("t")).collect()
    }
    whole = bytes(per_group.agg(F.theta_intersection_agg("t")).collect()[0][0])
    assert Sketch("theta_intersection_agg").merge(halves[True], halves[False]) == whole


def test_a_theta_sketch_of_one_value_merged_keeps_javas_single_item_image(spark):
    frame = spark.createDataFrame([(True, 0.5), (False, 0.5), (False, None)], "half boolean, x double")
    halves = {r["half"]: bytes(r["t"]) for r in frame.groupBy("half").agg(F.theta_sketch_agg("x").alias("t")).collect()}
    whole = bytes(frame.agg(F.theta_sketch_agg("x")).collect()[0][0])
    assert Sketch("theta_sketch_agg", (12,)).merge(halves[True], halves[False]) == whole


@pytest.mark.parametrize("keys", [7, 0], ids=["overlapping", "disjoint"])
def test_tuple_intersections_of_two_halves_are_sparks(spark, keys):
    rows = [(i % 2 == 0, i % 3, (i % keys if keys else i), float(i % 4)) for i in range(120)]
    frame = spark.createDataFrame(rows, "half boolean, g int, k bigint, x double").repartition(2)
    per_group = frame.groupBy("half", "g").agg(F.tuple_sketch_agg_double("k", "x", 12, "max").alias("t"))
    intersect = F.tuple_intersection_agg_double("t", "max").alias("t")
    halves = {r["half"]: bytes(r["t"]) for r in per_group.groupBy("half").agg(intersect).collect()}
    whole = bytes(per_group.agg(intersect).collect()[0][0])
    merged = Sketch("tuple_intersection_agg_double", ("max",)).merge(halves[True], halves[False])
    assert sketch_summary("tuple_double", merged) == sketch_summary("tuple_double", whole)
    images = spark.createDataFrame([(merged, whole)], "ours binary, sparks binary")
    estimates = images.select(F.tuple_sketch_estimate_double("ours"), F.tuple_sketch_estimate_double("sparks"))
    ours, sparks = estimates.collect()[0]
    assert ours == sparks and (ours > 0) == bool(keys)
