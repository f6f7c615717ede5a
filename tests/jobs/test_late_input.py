"""The project's own jobs with a tenth of the input 12 s late (beyond the 5 s watermark delay and a batch's advance),
two files per batch back to back: misa's whole output, every row with its batch id, equals plain Spark's (its last
batch, which has no data, included)."""

from __future__ import annotations

from pathlib import Path

import pytest
from job_helpers import assert_same_output, native_output, run_in_process

from jobs import cluster_monitoring, linear_road
from jobs.gen.cm import generate_cm
from jobs.gen.lr import generate_lr
from jobs.gen.parts import LateArrivals

LATE = LateArrivals(0.1, 12.0, seed=3)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    cm, lr = tmp_path_factory.mktemp("cm-late"), tmp_path_factory.mktemp("lr-late")
    generate_cm(cm, rate=200, seconds=64, seed=3, files_per_second=0.25, jobs=100, progress=False, late=LATE)
    generate_lr(lr, rate=2, seconds=150, seed=3, files_per_second=1 / 15, progress=False, late=LATE)
    return {"cm": cm, "lr": lr}


@pytest.mark.slow  # about 40 s each: whole jobs in both engines (the differential tests cover the rules in CI)
@pytest.mark.parametrize(
    "job,query,output_mode",
    [(cluster_monitoring, "cm2", "update"), (cluster_monitoring, "cm2", "append"), (linear_road, "lr2", None)],
)
def test_late_rows_are_judged_as_spark_judges_them(spark, inputs, tmp_path, job, query, output_mode):
    data = inputs["lr" if job is linear_road else "cm"]
    run_in_process(spark, job, query, "native", data, tmp_path / "native", output_mode)
    run_in_process(spark, job, query, "misa", data, tmp_path / "misa", output_mode)
    assert_same_output(tmp_path / "misa", native_output(tmp_path / "native"))
