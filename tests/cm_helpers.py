"""The job test helpers (job_helpers) bound to the Cluster Monitoring job."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import job_helpers
from job_helpers import assert_same_output, assert_same_results, output  # noqa: F401  (re-exported for the CM tests)

from jobs import cluster_monitoring


def run_in_process(spark, query: str, mode: str, data: Path, run_dir: Path, output_mode: str | None = None) -> dict:
    return job_helpers.run_in_process(spark, cluster_monitoring, query, mode, data, run_dir, output_mode)


spark_submit = partial(job_helpers.spark_submit, cluster_monitoring)
results = partial(job_helpers.results, cluster_monitoring)
