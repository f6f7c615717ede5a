"""A StatefulProcessor through misa's adapter and through Spark's transformWithStateInPandas (RocksDB state store),
batch by batch: random payments with late rows, back-to-back batches and restarts (misa fuzz --processor runs more)."""

from __future__ import annotations

import pytest

from verify.differential.processor import random_processor_case, run_processor_case

SEEDS = [pytest.param(seed, marks=pytest.mark.slow) for seed in range(1, 9)]  # suite time: misa fuzz --processor


@pytest.mark.parametrize("seed", SEEDS)
def test_the_processor_gives_sparks_rows(spark, tmp_path, seed):
    case = random_processor_case(seed)
    assert case.rows >= 5
    mismatch = run_processor_case(spark, case, tmp_path / "run")
    assert mismatch is None, f"{case.describe()}\n{mismatch}"
