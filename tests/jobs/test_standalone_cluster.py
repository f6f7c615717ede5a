"""Where users run: a Spark standalone cluster (a master and two workers on this machine), CM2 in misa mode
submitted with ``spark-submit --master spark://…``, killed and restarted, equal to plain Spark's output.

The executors are separate processes on the workers; the state stays with the driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from cm_helpers import assert_same_output, output, run_in_process, spark_submit

from jobs.gen.cm import generate_cm
from services.ports import free_port

pytestmark = pytest.mark.slow
SPARK_CLASS = str(Path(sys.executable).parent / "spark-class")


@contextmanager
def standalone_cluster(work: Path, workers: int = 2) -> Iterator[str]:
    """A master and ``workers`` workers (one core, 1 GiB each) started from pyspark's own scripts; the master URL."""
    port, ui = free_port(), free_port()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOG_DIR=str(work / "logs"))
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    master = f"spark://127.0.0.1:{port}"
    processes = [
        subprocess.Popen(
            [
                SPARK_CLASS,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            env=env,
            stdout=(logs / "master.log").open("w"),
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        for i in range(workers):
            processes.append(
                subprocess.Popen(
                    [
                        SPARK_CLASS,
                        "org.apache.spark.deploy.worker.Worker",
                        master,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        str(work / f"worker-{i}"),
                    ],
                    env=env,
                    stdout=(logs / f"worker-{i}.log").open("w"),
                    stderr=subprocess.STDOUT,
                )
            )
        _wait_for_workers(ui, workers)
        yield master
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_for_workers(ui: int, workers: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as answer:
                state = json.load(answer)
            if sum(w["state"] == "ALIVE" for w in state.get("workers", [])) >= workers:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the standalone cluster did not have {workers} live workers within {timeout_s:.0f} s")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cluster-input")
    generate_cm(folder, rate=200, seconds=96, seed=9, files_per_second=0.125, jobs=200)  # 6 batches
    return folder


def test_cm2_on_a_standalone_cluster_killed_and_restarted_equals_plain_spark(spark, data, tmp_path):
    reference = tmp_path / "native"
    run_in_process(spark, "cm2", "native", data, reference)
    conf = {
        "spark.executor.cores": "1",
        "spark.executor.memory": "1g",
        "spark.cores.max": "2",
        "spark.pyspark.python": sys.executable,
    }
    run = tmp_path / "misa"
    with standalone_cluster(tmp_path / "cluster") as master:
        killed = spark_submit(
            "cm2", "misa", data, run, failpoints="commit.after_apply=kill(3)", conf=conf, master=master
        )
        assert killed.returncode == 128 + 9, killed.stderr[-3000:]
        done = spark_submit("cm2", "misa", data, run, conf=conf, master=master)
        assert done.returncode == 0, done.stderr[-3000:]
    executors = list((tmp_path / "cluster").glob("worker-*/app-*/*/stderr"))
    assert len({p.parts[-4] for p in executors}) == 2, executors  # both workers ran executors, in their own processes
    assert_same_output(run, output(reference))
