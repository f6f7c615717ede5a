"""Group columns of every key type give plain Spark's rows and output types; other operators resolve their
columns at start like the aggregation (a missing column or a type they cannot use is named)."""

from __future__ import annotations

import json
import math
import tempfile
from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from aggregation_runs import assert_same, assert_same_types, run_misa, run_native
from pyspark.sql import types as T

from misa.config import MisaConfig
from misa.exceptions import AnalysisError
from misa.operators.aggregation import Agg, Aggregation
from misa.operators.interval_join import IntervalJoin
from misa.operators.keyed import KeyedJoin, LookupJoin, TopN
from misa.operators.lookup_aggregation import LookupAggregation
from misa.state.store import StateStore
from misa.state.view import StateView

SCHEMA = "d double, f float, ts timestamp, day date, b boolean, s string, t timestamp, x long"
AT = [datetime(2024, 1, 1, 0, 0, s, tzinfo=timezone.utc) for s in (1, 4, 12, 15)]
BATCHES = [
    [
        (0.0, 1.5, AT[0], date(2024, 1, 1), True, "a", AT[0], 1),
        (-0.0, 1.5, AT[1], date(1960, 5, 1), False, None, AT[1], 2),
        (math.nan, None, None, None, None, "a", AT[2], 3),
    ],
    [
        (-0.0, -2.25, AT[0], date(2024, 1, 1), True, "a", AT[1], 4),
        (float("nan"), 1.5, None, date(1960, 5, 1), None, "b", AT[2], 5),
        (None, None, AT[3], None, False, "a", AT[3], 6),
        (-1e300, float("inf"), AT[0], date(2024, 1, 1), True, "a", AT[3], 7),
    ],
]
SHAPES = {"continuous": {}, "tumbling": {"event_time": "t", "window": "10 seconds", "watermark_delay": "1 hour"}}


@pytest.fixture
def no_ansi(session_conf) -> None:
    session_conf({"spark.sql.ansi.enabled": "false"})


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("group_by", [["d"], ["ts"], ["day"], ["f", "b"], ["s", "d", "ts", "day"]])
def test_group_columns_of_each_key_type_give_sparks_rows_and_types(spark, no_ansi, group_by, shape):
    op = Aggregation(group_by, [Agg("total", "sum", "x"), Agg("n", "count", "x")], **SHAPES[shape])
    op.signature(spark.createDataFrame([], SCHEMA).schema)  # accepted at start
    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2"})
    with tempfile.TemporaryDirectory() as tmp, StateStore(config, Path(tmp) / "state", f"file://{tmp}/dfs") as store:
        got, got_schema = run_misa(spark, op, SCHEMA, BATCHES, StateView(store))
    expected, expected_schema = run_native(spark, op, SCHEMA, [row for batch in BATCHES for row in batch])
    assert_same({_nan_free(k): v for k, v in got.items()}, {_nan_free(k): v for k, v in expected.items()})
    assert_same_types(got_schema, expected_schema)


def _nan_free(key: tuple) -> tuple:
    """A key with NaN as a string (NaN != NaN would make equal keys differ)."""
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in key)


INPUT = T.StructType(
    [
        T.StructField("k", T.LongType()),
        T.StructField("s", T.StringType()),
        T.StructField("t", T.TimestampType()),
        T.StructField("ms", T.LongType()),
        T.StructField("price", T.DecimalType(10, 2)),
        T.StructField("left", T.StructType([T.StructField("k", T.LongType()), T.StructField("v", T.StringType())])),
        T.StructField("right", T.StructType([T.StructField("k", T.LongType()), T.StructField("c", T.LongType())])),
    ]
)


@pytest.mark.parametrize(
    "operator,message",
    [
        (TopN(["k"], ["s", "ms"], [("ms", "descending"), ("s", "ascending")]), None),
        (TopN(["kk"], ["ms"], [("ms", "ascending")]), r'\[UNRESOLVED_COLUMN\] column "kk" used by top n'),
        (TopN(["price"], ["ms"], [("ms", "ascending")]), r'"price" of type decimal\(10,2\) .* cannot be a state key'),
        (TopN(["k"], ["t"], [("t", "ascending")]), r'"t" of type timestamp .* cannot be kept in state'),
        (IntervalJoin(["k"], "t", ["ms"]), None),
        (IntervalJoin(["k"], "ms", ["ms"]), r'"ms" of type bigint .* cannot be an event time'),
        (IntervalJoin(["k"], "t", ["s"]), r'"s" of type string used by the interval join\'s payload'),
        (LookupJoin("k", ["k", "s"], "side.jsonl"), None),
        (LookupJoin("s", ["s"], "side.jsonl"), r'"s" of type string .* cannot be a side-table key'),
        (LookupJoin("k", ["k", "missing"], "side.jsonl"), r'\[UNRESOLVED_COLUMN\] column "missing"'),
        (KeyedJoin("left", "k", "right", "k", ("c", 10)), None),
        (KeyedJoin("left", "k", "right", "k", ("cc", 10)), r'column "cc" used by the keyed join\'s where'),
        (KeyedJoin("s", "k", "right", "k", ("c", 10)), r'"s" of type string .* must be a struct'),
        (LookupAggregation("s", Aggregation(["campaign"], [Agg("n", "count", "ms")]), list), None),
        (LookupAggregation("k", Aggregation(["c"], [Agg("n", "count", "ms")]), list), r'"k" of type bigint .*lookup'),
        (LookupAggregation("s", Aggregation(["c"], [Agg("n", "sum", "ms2")]), list), r'column "ms2" used by Agg\('),
    ],
)
def test_each_operator_resolves_its_columns_and_types(operator, message):
    if message is None:
        signature = operator.signature(INPUT)
        assert json.loads(json.dumps(signature)) == signature and signature["operator"] == type(operator).__name__
    else:
        with pytest.raises(AnalysisError, match=message):
            operator.signature(INPUT)
