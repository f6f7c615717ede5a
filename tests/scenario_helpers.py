"""One scenario through misa and plain Spark, checked equal and not empty (a case whose Spark output is empty
checks nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pyspark.sql import SparkSession

from verify.differential.scenarios import Builder, Round, Scenario, run_scenario


def assert_sparks_rows(
    spark: SparkSession, name: str, build: Builder, mode: str, rounds: Sequence[Round], work: Path
) -> None:
    """misa gives Spark's batches and rows for the scenario, and Spark wrote some."""
    outcome = run_scenario(spark, Scenario(name, build, mode, tuple(rounds)), work)
    assert outcome.ok, f"{name}: {outcome}"
    assert outcome.spark_rows, f"{name}: Spark wrote no rows, the case checks nothing"
