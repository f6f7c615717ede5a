"""Shrinking a failing differential case to a small one that still fails: whole rounds, then files, then rows."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

from pyspark.sql import SparkSession

from verify.differential.cases import Case
from verify.differential.runner import Mismatch, run_case

Rounds = list[list[list[dict]]]


def shrink(
    spark: SparkSession, case: Case, work: Path, budget: int = 80, progress: Callable[[str], None] = print
) -> Case:
    """The smallest case found (within ``budget`` runs) by removing parts of ``case`` while a mismatch remains."""
    runs = 0
    changed = True
    while changed and runs < budget:
        changed = False
        for smaller in _smaller(case):
            runs += 1
            mismatch = run_case(spark, smaller, work)
            if isinstance(mismatch, Mismatch):
                case, changed = smaller, True
                progress(f"  still fails with {smaller.files} files, {smaller.rows} rows: {mismatch}")
                break
            if runs >= budget:
                break
    return case


def _smaller(case: Case) -> Iterator[Case]:
    """Cases with one round, one file or one row less, largest cuts first."""
    rounds: Rounds = [[list(f) for f in r] for r in case.rounds]
    for i in range(len(rounds)):
        yield case.with_rounds(rounds[:i] + rounds[i + 1 :])
    for i, files in enumerate(rounds):
        for j in range(len(files)):
            yield case.with_rounds(_replace(rounds, i, files[:j] + files[j + 1 :]))
    for i, files in enumerate(rounds):
        for j, rows in enumerate(files):
            for k in range(len(rows)):
                if len(rows) > 1:
                    yield case.with_rounds(_replace(rounds, i, files[:j] + [rows[:k] + rows[k + 1 :]] + files[j + 1 :]))


def _replace(rounds: Rounds, index: int, files: list[list[dict]]) -> Rounds:
    return rounds[:index] + [files] + rounds[index + 1 :]
