"""Running Cluster Monitoring queries in tests and comparing their results with plain Spark's."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

from jobs import cluster_monitoring
from misa.sink import final_results

ROOT = Path(__file__).resolve().parents[1]


def job_args(query: str, mode: str, data: Path, run_dir: Path, output_mode: str = "update") -> list[str]:
    return ["--query", query, "--mode", mode, "--input", str(data), "--output", str(run_dir / "out"),
            "--checkpoint", str(run_dir / "ckpt"), "--available-now", "--max-files-per-trigger", "2",
            "--output-mode", output_mode, "--watermark-delay", "5s", "--metrics", str(run_dir / "metrics.jsonl"),
            "--quiet"]


def run_in_process(spark, query: str, mode: str, data: Path, run_dir: Path, output_mode: str = "update") -> dict:
    cluster_monitoring.run(spark, cluster_monitoring.parse_args(job_args(query, mode, data, run_dir, output_mode)))
    return results(query, run_dir)


def spark_submit(query: str, mode: str, data: Path, run_dir: Path, failpoints: str = "",
                 conf: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The job exactly as a user runs it: spark-submit in its own process."""
    confs = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.misa.state.shards": "2",
             "spark.sql.session.timeZone": "UTC", **(conf or {})}
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    for key, value in confs.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += [str(ROOT / "jobs" / "cluster_monitoring.py")] + job_args(query, mode, data, run_dir)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               MISA_FAILPOINTS=failpoints)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def results(query: str, run_dir: Path) -> dict:
    return final_results(run_dir / "out", cluster_monitoring.KEY_COLUMNS[query])


def assert_same_results(got: dict, expected: dict) -> None:
    """Same windows and keys; values equal up to float summation order (relative 1e-9)."""
    assert expected, "the reference produced no rows: the test data is too small"
    assert set(got) == set(expected), (
        f"missing {sorted(set(expected) - set(got))[:3]}, extra {sorted(set(got) - set(expected))[:3]}")
    for key, row in expected.items():
        for column, value in row.items():
            other = got[key][column]
            if isinstance(value, float):
                assert math.isclose(other, value, rel_tol=1e-9, abs_tol=1e-12), (key, column, other, value)
            else:
                assert other == value, (key, column, other, value)
