"""Ctrl-C on a user's own job (the README's quick start run with plain ``python``): one line, no tracebacks."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from job_helpers import ctrl_c_after

SCRIPT = """
    import sys
    from pyspark.sql import SparkSession, functions as F
    from misa import Agg, Aggregation, MisaConfig, ParquetBatchSink, StatefulJob

    root = sys.argv[1]
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    events = spark.readStream.schema("k long, v long").option("maxFilesPerTrigger", 1).json(root + "/in")
    job = StatefulJob(
        Aggregation(["k"], [Agg("total", "sum", "v")]),
        ParquetBatchSink(root + "/out"),
        checkpoint_location=root + "/ckpt",
        metrics_path=root + "/metrics.jsonl",
        echo=None,
    )
    try:
        job.start(spark, events, trigger={"processingTime": "1 second"}).awaitTermination()
    finally:
        job.close(spark)
"""


@pytest.mark.slow  # about 30 s: a user's job runs a batch, then Ctrl-C
def test_ctrl_c_stops_a_users_job_in_one_line(tmp_path: Path):
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"{i}.json").write_text(json.dumps({"k": i % 2, "v": i}) + "\n")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    returncode, printed = ctrl_c_after([sys.executable, str(script), str(tmp_path)], env, tmp_path / "metrics.jsonl", 2)
    assert "Traceback" not in printed and "py4j" not in printed.lower(), printed[-3000:]
    lines = [line for line in printed.splitlines() if "Ctrl-C" in line]
    assert len(lines) == 1 and lines[0].startswith("stopped by Ctrl-C; the state is durable up to version"), printed
    assert returncode == 0, printed[-3000:]
