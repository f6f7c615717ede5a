"""Object aggregates over sliding windows written in Spark's API (issue 63, item 5), through misa.from_query and
through plain Spark, compared batch id by batch id over random rows with restarts
(:func:`verify.differential.runner.run_case`). Each was refused before ("over sliding windows is not in misa yet"):
min/max/sum/avg of objects and max_by/min_by, then first/last/any_value/collect_list/collect_set."""

from __future__ import annotations

import pytest

from verify.differential.cases import Query, Settings
from verify.differential.queries import query_case_of
from verify.differential.runner import run_case

CASES = {
    "update: max_by, min_by of integers ordered by t, min, sum": Query(
        "sliding", {"k0": "string"}, ("max_by", "min_by", "min", "sum"), "bigint", 10, 5, 2
    ),
    "append: min, max, max_by, approx_count_distinct of strings": Query(
        "sliding",
        {"k0": "int"},
        ("min", "max", "max_by", "approx_count_distinct"),
        "string",
        10,
        2,
        2,
        "append",
    ),
    "update: sum, avg, min, max, min_by of decimals": Query(
        "sliding", {"k0": "bigint"}, ("sum", "avg", "min", "max", "min_by"), "decimal(12,2)", 20, 5, 5
    ),
    "complete: min, max, max_by of booleans": Query(
        "sliding", {"k0": "string"}, ("min", "max", "max_by"), "boolean", 10, 5, 2, "complete"
    ),
    # of the window's rows in Spark's order: each pane's values stamped with their batch and place (pane_order)
    "update: first, last, first ignoring nulls, collect_list of integers": Query(
        "sliding", {"k0": "string"}, ("first", "last", "first_ignore_nulls", "collect_list"), "bigint", 10, 5, 2
    ),
    "append: collect_list, collect_set, min of strings": Query(
        "sliding", {"k0": "int"}, ("collect_list", "collect_set", "min"), "string", 10, 2, 2, "append"
    ),
    "complete: last ignoring nulls, any_value, collect_set of doubles": Query(
        "sliding", {"k0": "bigint"}, ("last_ignore_nulls", "any_value", "collect_set"), "double", 20, 5, 5, "complete"
    ),
    "append: first, last ignoring nulls, collect_list of booleans": Query(
        "sliding", {}, ("first", "last_ignore_nulls", "collect_list"), "boolean", 20, 4, 0, "append"
    ),
}


@pytest.mark.slow  # 30 to 80 s each: make test runs both kinds over sliding windows in test_more_aggregates.py
@pytest.mark.parametrize("name", list(CASES))
def test_object_aggregates_over_sliding_windows_give_sparks_rows_and_types(spark, tmp_path, name):
    case = query_case_of(CASES[name], Settings(processes=2 if "append" in name else 1), seed=63)
    mismatch = run_case(spark, case, tmp_path / "run")
    assert mismatch is None, f"{case.describe()}\n{mismatch}"
