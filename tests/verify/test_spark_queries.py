"""docs/spark-queries.md stays true: every row's query is built through misa.from_query and runs or is refused as
the table says, and the random differential cases (misa fuzz --from-query) cover every row that runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException

from misa import MisaConfig, UnsupportedQueryError, from_query
from misa.query.job import planned
from misa.query.translate import FUNCTIONS
from verify.differential.catalog import ENTRIES, REFUSED, SOURCE_SCHEMA, Entry, render
from verify.differential.queries import case_tags, random_query_case

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark-queries.md"
FUZZ_CASES = 500  # the fuzz run the docs report covers these seeds


def test_the_docs_table_is_the_catalogs():
    assert render() in DOC.read_text(), "docs/spark-queries.md's table differs from verify/differential/catalog.py"


# Every other row runs in the default suite, the rest with -m slow (together: the whole table), for CI's time.
TABLE_ROWS = [
    pytest.param(entry, id=entry.spark[:60], marks=[pytest.mark.slow] if index % 2 else [])
    for index, entry in enumerate(ENTRIES)
]


@pytest.mark.parametrize("entry", TABLE_ROWS)
def test_each_query_of_the_table_runs_or_is_refused_as_it_says(spark, tmp_path, entry: Entry):
    (tmp_path / "in").mkdir()
    rows = spark.readStream.schema(SOURCE_SCHEMA).json(str(tmp_path / "in"))

    def build():
        return planned(entry.build(rows), entry.output_mode, lambda batch_id, table: None)

    if entry.misa == REFUSED:
        with pytest.raises((UnsupportedQueryError, AnalysisException), match=entry.refusal.replace("(", r"\(")):
            build()
    else:
        translation, source, _ = build()
        assert source.isStreaming and translation.operator is not None


def test_from_query_builds_a_job_that_closes(spark, tmp_path):
    (tmp_path / "in").mkdir()
    rows = spark.readStream.schema(SOURCE_SCHEMA).json(str(tmp_path / "in"))
    config = MisaConfig.from_mapping({"spark.misa.state.processes": "1"})
    job = from_query(
        ENTRIES[0].build(rows),
        lambda b, t: None,
        str(tmp_path / "ckpt"),
        output_mode="update",
        config=config,
        echo=None,
    )
    job.close()


def test_the_random_cases_cover_every_row_that_runs():
    tags: Counter = Counter()
    for seed in range(FUZZ_CASES):
        tags.update(case_tags(random_query_case(seed)))
    missing = {e.spark: [t for t in e.covered_by if not tags[t]] for e in ENTRIES if e.misa != REFUSED}
    assert all(e.covered_by for e in ENTRIES if e.misa != REFUSED)
    assert not any(missing.values()), missing


def test_every_aggregate_function_of_sparks_registry_is_one_misa_computes(spark):
    """Each function of Spark's registry whose class is an aggregate function is one misa's translation takes (its
    builders resolve to those), but the ranking window functions and metric views' measure, which no aggregation
    holds: a Spark version adding an aggregate fails here."""
    jvm = spark._jvm
    aggregate = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction")
    registry = jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
    names = registry.listFunction().iterator()
    classes = set()
    while names.hasNext():
        info = registry.lookupFunction(names.next())
        if info.isDefined() and aggregate.isAssignableFrom(jvm.java.lang.Class.forName(info.get().getClassName())):
            classes.add(str(info.get().getClassName()).rsplit(".", 1)[1])
    windows = {"CumeDist", "DenseRank", "NthValue", "NTile", "PercentRank", "Rank", "RowNumber"}
    assert classes - set(FUNCTIONS) == windows | {"Measure"}
    assert {"SchemaOfVariantAgg", "ApproxTopK", "VectorSum", "VectorAvg", "CountIf"} <= classes
