"""``applyInPandasWithState`` through ``misa.from_query`` against plain Spark, batch by batch, on the same function
(:mod:`verify.differential.group_state`): late rows, back-to-back batches, restarts between rounds, batches without
data (event-time timeouts), each timeout mode and output mode."""

from __future__ import annotations

from typing import Any

import pytest

from verify.differential.cases import Case, Query, Settings
from verify.differential.group_state import SHAPES
from verify.differential.queries import query_case_of
from verify.differential.runner import run_case


def case(function: str, key_type: str, delay_s: int, seed: int, **settings: Any) -> Case:
    """A case of ``function`` over a key column of ``key_type``, its rows drawn from ``seed``."""
    mode = SHAPES[function].mode
    query = Query("group_state", {"k0": key_type}, functions=(function,), delay_s=delay_s, output_mode=mode)
    return query_case_of(query, Settings(**settings), seed)


CASES = [
    # event-time sessions: timeouts in batches without data, a call that changes nothing, two rounds (a restart)
    pytest.param(case("sessions", "string", 2, 6, commit_mode="misa", prefetching="true"), id="sessions"),
    pytest.param(
        case("sessions", "bigint", 5, 7, commit_mode="async-ckpt", processes=2),
        id="sessions-bigint-processes",
        marks=pytest.mark.slow,
    ),
    pytest.param(case("running", "string", 2, 8, commit_mode="sync"), id="running", marks=pytest.mark.slow),
    pytest.param(case("running", "bigint", 0, 3, prefetching="auto"), id="running-bigint", marks=pytest.mark.slow),
    # an hour's processing-time timeout: no group times out in either engine
    pytest.param(case("idle", "string", 0, 9), id="idle", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("the_case", CASES)
def test_the_function_gives_sparks_rows(spark, tmp_path, the_case):
    assert len(the_case.rounds) >= 2, "a case restarts between rounds"
    mismatch = run_case(spark, the_case, tmp_path / "run")
    assert mismatch is None, f"{the_case.describe()}\n{mismatch}"
