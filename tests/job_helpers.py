"""Running any job module (``run``, ``parse_args``, ``KEY_COLUMNS``) in tests and comparing with plain Spark."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import ModuleType

import pyspark

from common.failpoints import ONCE_VAR
from misa.io.sink import final_results, read_batches
from verify.output_diff import Output, diff_rows, read_output

ROOT = Path(__file__).resolve().parents[1]


def job_args(query: str, mode: str, data: Path, run_dir: Path, output_mode: str | None = None) -> list[str]:
    """The command line of a small test run: every file available now, two files per batch."""
    args = [
        "--query",
        query,
        "--mode",
        mode,
        "--input",
        str(data),
        "--output",
        str(run_dir / "out"),
        "--checkpoint",
        str(run_dir / "ckpt"),
        "--available-now",
        "--max-files-per-trigger",
        "2",
        "--watermark-delay",
        "5s",
        "--metrics",
        str(run_dir / "metrics.jsonl"),
        "--quiet",
    ]
    return args + (["--output-mode", output_mode] if output_mode else [])


def run_in_process(
    spark, job: ModuleType, query: str, mode: str, data: Path, run_dir: Path, output_mode: str | None = None
) -> dict:
    """Run ``job``'s query in this process's Spark session; its final results."""
    job.run(spark, job.parse_args(job_args(query, mode, data, run_dir, output_mode)))
    return results(job, query, run_dir)


def spark_submit(
    job: ModuleType,
    query: str,
    mode: str,
    data: Path,
    run_dir: Path,
    failpoints: str = "",
    conf: dict[str, str] | None = None,
    master: str = "local[2]",
) -> subprocess.CompletedProcess:
    """The job exactly as a user runs it: spark-submit in its own process (``master``: where it runs)."""
    cmd, env = spark_submit_command(job, job_args(query, mode, data, run_dir), failpoints, conf, master)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


QUICK_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def spark_submit_command(
    job: ModuleType,
    args: list[str],
    failpoints: str = "",
    conf: dict[str, str] | None = None,
    master: str = "local[2]",
) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command line running ``job`` with ``args``, and its environment: a failpoint's kill or stop
    fires once per command (``MISA_FAILPOINTS_ONCE``: not again in a state host that took a killed one's place)."""
    confs = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.misa.state.shards": "2",
        "spark.misa.state.processes": "1",  # whatever this machine's cores (tests of worker processes ask for 2)
        "spark.sql.session.timeZone": "UTC",
        # short-lived JVMs on 2 cores: the C1 compiler alone and the serial collector start them sooner
        "spark.driver.extraJavaOptions": QUICK_JVM,
        "spark.executor.extraJavaOptions": QUICK_JVM,
        **(conf or {}),
    }
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", master]
    for key, value in confs.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += [str(Path(job.__file__).resolve()), *args]
    env = dict(
        os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, MISA_FAILPOINTS=failpoints
    )
    if failpoints:
        env[ONCE_VAR] = tempfile.mkdtemp(prefix="misa-failpoints-fired-")
    return cmd, env


def results(job: ModuleType, query: str, run_dir: Path) -> dict:
    """The last row written for each key (``job.KEY_COLUMNS[query]``) across batches."""
    return final_results(run_dir / "out", job.KEY_COLUMNS[query])


def output_rows(run_dir: Path) -> Counter:
    """Every output row of every batch, as a multiset of value tuples (for append-only outputs)."""
    return Counter(tuple(row.values()) for _, table in read_batches(run_dir / "out") for row in table.to_pylist())


def output(run_dir: Path) -> Output:
    """Every row of every batch with its batch id (floats rounded, see :mod:`verify.output_diff`)."""
    return read_output(run_dir / "out")


def native_output(run_dir: Path) -> Output:
    """A native run's output: every row of every batch, batches without data included (misa numbers them as Spark
    does)."""
    return output(run_dir)


def assert_same_output(run_dir: Path, expected: Output) -> None:
    """The run's whole output equals the reference's as a multiset (no row lost, none doubled or stale)."""
    assert expected.size, "the reference produced no rows: the test data is too small"
    diff = diff_rows(output(run_dir).rows, expected.rows)
    assert diff.ok, diff.describe(expected.columns)


def metrics(run_dir: Path) -> list[dict]:
    """The run's metrics records of its data batches (not of the batches without data Spark's trigger ran)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if not r.get("without_data")]


def assert_same_results(got: dict, expected: dict) -> None:
    """Same windows and keys; values equal up to float summation order (relative 1e-9)."""
    assert expected, "the reference produced no rows: the test data is too small"
    assert set(got) == set(expected), (
        f"missing {sorted(set(expected) - set(got))[:3]}, extra {sorted(set(got) - set(expected))[:3]}"
    )
    for key, row in expected.items():
        for column, value in row.items():
            other = got[key][column]
            if isinstance(value, float):
                assert math.isclose(other, value, rel_tol=1e-9, abs_tol=1e-12), (key, column, other, value)
            else:
                assert other == value, (key, column, other, value)


def ctrl_c_after(cmd: list[str], env: dict[str, str], metrics_path: Path, batches: int) -> tuple[int, str]:
    """Run ``cmd`` in its own process group (as a terminal's foreground job: Ctrl-C reaches the JVM and Python),
    send SIGINT once ``metrics_path`` holds ``batches`` records; its exit status and everything it printed."""
    import signal
    import time

    job = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not (metrics_path.exists() and len(metrics_path.read_text().splitlines()) >= batches):
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()[0][-3000:]
            time.sleep(0.5)
        os.killpg(job.pid, signal.SIGINT)
        printed, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    return job.returncode, printed


def executor_logs(driver_log: str) -> str:
    """The executors' stderr of the application the driver's log names, read and removed (a local cluster keeps it
    in pyspark's own folder, ``work/APP-ID``)."""
    app = re.search(r"app-\d{14}-\d{4}", driver_log)
    if app is None:
        return ""
    folder = Path(pyspark.__file__).parent / "work" / app.group()
    logs = "".join(p.read_text(errors="replace") for p in sorted(folder.glob("*/stderr")))
    shutil.rmtree(folder, ignore_errors=True)
    return logs
