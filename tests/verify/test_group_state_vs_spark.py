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
    pytest.param(case("sessions", "string", 2, 63, commit_mode="misa", prefetching="true"), id="sessions"),
    pytest.param(
        case("sessions", "string", 2, 6, commit_mode="sync"), id="sessions-more-batches", marks=pytest.mark.slow
    ),
    pytest.param(
        case("sessions", "bigint", 5, 7, commit_mode="async-ckpt", processes=2),
        id="sessions-bigint-processes",
        marks=pytest.mark.slow,
    ),
    pytest.param(case("running", "string", 2, 8, commit_mode="sync"), id="running", marks=pytest.mark.slow),
    pytest.param(case("running", "bigint", 0, 3, prefetching="auto"), id="running-bigint", marks=pytest.mark.slow),
    # state fields of every type Spark stores, read back after each batch and after a restart
    pytest.param(case("typed", "string", 2, 11, commit_mode="misa"), id="typed", marks=pytest.mark.slow),
    pytest.param(case("typed", "int", 0, 12, processes=2), id="typed-processes", marks=pytest.mark.slow),
    # a struct key (the state keyed by its text): event-time timeouts give a timed-out group its key back
    pytest.param(
        case("sessions", "struct<a: int, s: string, n: struct<l: array<bigint>>>", 5, 2402, commit_mode="misa"),
        id="sessions-struct-key",
        marks=pytest.mark.slow,
    ),
    pytest.param(case("typed", "array<string>", 2, 177, commit_mode="sync"), id="array-key", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("the_case", CASES)
def test_the_function_gives_sparks_rows(spark, tmp_path, the_case):
    assert len(the_case.rounds) >= 2, "a case restarts between rounds"
    mismatch = run_case(spark, the_case, tmp_path / "run")
    assert mismatch is None, f"{the_case.describe()}\n{mismatch}"


@pytest.mark.parametrize(
    "function, seed",
    [pytest.param("instant", 5, marks=pytest.mark.slow), pytest.param("idle", 9, marks=pytest.mark.slow)],
)
def test_processing_time_timeouts_fire_as_in_spark_in_data_batches(spark, tmp_path, function, seed):
    """Processing-time timeouts without Spark's batches without data (which it runs after every batch for them, so
    that ``availableNow`` would not end): ``instant``'s 1 ms timeout times out, in each batch, every group an earlier
    batch saw and this one does not (each batch starts over 1 ms after the one before, in both engines: a wall-clock
    margin of the batches' own length); ``idle``'s hour times out none."""
    the_case = case(function, "string", 0, seed)
    files = [{row["k0"] for row in rows} for files in the_case.rounds for rows in files]
    assert len(the_case.rounds) >= 2 and any(before - after for before, after in zip(files, files[1:]))
    mismatch = run_case(spark, the_case, tmp_path / "run")  # without batches without data (verify's runner)
    assert mismatch is None, f"{the_case.describe()}\n{mismatch}"
