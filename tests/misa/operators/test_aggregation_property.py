"""Property: random rows in random batches through misa's Aggregation give plain Spark's rows and output types.

The rows hold nulls, NaN, infinities and extreme integers (the long range's ends, 2^53 + 1); integer sums
wrap around (ANSI mode off, as Spark's do then). Float sums are over eighths of small integers, so they
are exact in any order and every value compares exactly with Spark's, whatever the batch boundaries.
"""

from __future__ import annotations

import math
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from aggregation_runs import assert_same, assert_same_types, run_misa, run_native
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from misa.config import MisaConfig
from misa.operators.aggregation import Agg, Aggregation
from misa.runtime.batch_cache import new_view
from misa.state.store import StateStore

SCHEMA = "g long, t timestamp, i long, n int, d double, e double, f float, ts timestamp"
AGGS = [
    *(Agg(f"i_{f}", f, "i") for f in ("sum", "min", "max", "count")),
    *(Agg(f"n_{f}", f, "n") for f in ("sum", "min", "avg")),
    Agg("d_min", "min", "d"),
    Agg("d_max", "max", "d"),
    *(Agg(f"e_{f}", f, "e") for f in ("sum", "avg", "min")),
    *(Agg(f"f_{f}", f, "f") for f in ("sum", "max")),
    Agg("ts_min", "min", "ts"),
    Agg("ts_max", "max", "ts"),
]
SHAPES = {
    "continuous": {},
    "tumbling": {"event_time": "t", "window": "10 seconds", "watermark_delay": "1 hour"},
    "sliding": {"event_time": "t", "window": "10 seconds", "slide": "4 seconds", "watermark_delay": "1 hour"},
}
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
SPECIAL_DOUBLES = [math.nan, math.inf, -math.inf, 0.0, -0.0]
EXTREME_LONGS = [2**63 - 1, -(2**63), 2**62, -(2**62), 2**53 + 1, -(2**53 + 1), 0, -1]


def maybe(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.none(), values)


EIGHTHS = st.integers(-(2**20), 2**20).map(lambda k: k / 8)  # exact in float and in sums of a few
ROW = st.tuples(
    maybe(st.integers(0, 2)),  # g
    st.integers(0, 30 * 10**6 - 1).map(lambda us: EPOCH + timedelta(microseconds=us)),  # t
    maybe(st.one_of(st.sampled_from(EXTREME_LONGS), st.integers(-(2**63), 2**63 - 1))),  # i
    maybe(st.integers(-(2**31), 2**31 - 1)),  # n
    maybe(st.one_of(st.sampled_from(SPECIAL_DOUBLES), st.floats(allow_nan=False))),  # d
    maybe(st.one_of(st.sampled_from(SPECIAL_DOUBLES), EIGHTHS)),  # e
    maybe(st.one_of(st.sampled_from(SPECIAL_DOUBLES), EIGHTHS)),  # f
    maybe(st.integers(-(2**61), 2**61).map(lambda us: EPOCH + timedelta(microseconds=us // 1000))),  # ts
)


@st.composite
def batches(draw) -> list[list[tuple]]:
    """Random rows cut into random batches (some possibly empty)."""
    rows = draw(st.lists(ROW, min_size=1, max_size=20))
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=2)))
    bounds = [0, *cuts, len(rows)]
    return [rows[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.fixture
def no_ansi(session_conf) -> None:
    session_conf({"spark.sql.ansi.enabled": "false"})


@pytest.mark.parametrize("shape", SHAPES)
@settings(
    max_examples=3,
    deadline=None,
    database=None,
    phases=[Phase.generate],  # no shrinking: each example runs Spark jobs, a failure shows its example as drawn
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(split=batches())
def test_random_batches_give_sparks_rows_and_types(spark, no_ansi, shape, split):
    op = Aggregation(["g"], AGGS, **SHAPES[shape])
    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2"})
    with tempfile.TemporaryDirectory() as tmp, StateStore(config, Path(tmp) / "state", f"file://{tmp}/dfs") as store:
        got, got_schema = run_misa(spark, op, SCHEMA, split, new_view(store, config, op))  # tumbling: memory tier
    expected, expected_schema = run_native(spark, op, SCHEMA, [row for batch in split for row in batch])
    assert_same(got, expected)
    assert_same_types(got_schema, expected_schema)
