"""A user's job written only in Spark's DataFrame API (jobs/spark_queries.py: a sliding-window aggregation, a
deduplication, a session window, a stream-stream join), each query through misa.from_query with spark-submit,
killed mid-run and restarted: the whole output equals plain Spark's, batch by batch (nothing lost, nothing
doubled)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest
from job_helpers import executor_logs, native_output, output, spark_submit_command

from jobs import spark_queries
from verify.output_diff import diff_rows

CLUSTER = "local-cluster[2,2,1024]"


@pytest.fixture(scope="module")
def payments(tmp_path_factory) -> Path:
    """Eight files of payments: four users, re-sent payments (same id, within and across files), late rows."""
    folder = tmp_path_factory.mktemp("payments")
    rng = random.Random(11)
    clock, next_id, sent = 0, 0, []
    for index in range(8):
        rows = []
        for _ in range(rng.randint(4, 9)):
            if sent and rng.random() < 0.2:
                rows.append(dict(rng.choice(sent)))  # sent again
                continue
            t = clock + rng.randint(0, 3000) if rng.random() < 0.8 else max(0, clock - rng.randint(6000, 20000))
            row = {"user": f"u{rng.randint(0, 3)}", "payment_id": next_id, "t": t, "amount": rng.randint(1, 90)}
            next_id += 1
            sent.append(row)
            rows.append(row)
        path = folder / f"part-{index:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (1_000_000 + index, 1_000_000 + index))
        clock += rng.choice((2000, 6000, 12000))
    return folder


def submit(
    query: str,
    mode: str,
    data: Path,
    run_dir: Path,
    failpoints: str = "",
    conf: dict[str, str] | None = None,
    master: str = "local[2]",
) -> subprocess.CompletedProcess:
    args = ["--query", query, "--mode", mode, "--input", str(data), "--output", str(run_dir / "out")]
    args += ["--checkpoint", str(run_dir / "ckpt")]
    cmd, env = spark_submit_command(spark_queries, args, failpoints, conf, master)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    executor_logs(done.stderr)  # a local cluster's executor logs, removed
    return done


@pytest.mark.slow  # three spark-submits per query: run on demand (-m slow)
@pytest.mark.parametrize("query", ["sliding", "dedup", "session", "repeat"])
def test_the_users_query_on_misa_survives_a_kill_and_equals_plain_spark(payments, tmp_path, query):
    native = submit(query, "native", payments, tmp_path / "native")
    assert native.returncode == 0, native.stderr[-3000:]
    killed = submit(query, "misa", payments, tmp_path / "misa", failpoints="commit.after_apply=kill(4)")
    assert killed.returncode == 128 + 9, killed.stderr[-3000:]
    restarted = submit(query, "misa", payments, tmp_path / "misa")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    expected = native_output(tmp_path / "native")
    assert expected.size, "plain Spark wrote no rows: the test input is too small"
    diff = diff_rows(output(tmp_path / "misa").rows, expected.rows)
    assert diff.ok, diff.describe(expected.columns)


@pytest.mark.slow  # two spark-submits per query, one on a local cluster: run on demand (-m slow)
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("query", ["sliding", "dedup", "session", "repeat"])
def test_the_users_query_with_its_state_on_two_executors_survives_an_executor_kill(payments, tmp_path, query):
    """Each operator family of from_query (window aggregation, deduplication, session window, stream-stream join) on
    local-cluster[2,2,1024], its state in two hosts; an executor JVM is SIGKILLed in its host's third commit: the
    lost partition moves to a new host, no batch fails, and the output is plain Spark's, batch by batch."""
    native = submit(query, "native", payments, tmp_path / "native")
    assert native.returncode == 0, native.stderr[-3000:]
    hosts = {"spark.misa.state.placement": "executors", "spark.misa.state.processes": "2"}
    killed = submit(query, "misa", payments, tmp_path / "misa", "commit.after_apply=killexecutor(3)", hosts, CLUSTER)
    assert killed.returncode == 0, killed.stderr[-5000:]
    assert re.search(r"state host of partition \d was lost; its partition moves", killed.stderr), killed.stderr[-3000:]
    expected = native_output(tmp_path / "native")
    diff = diff_rows(output(tmp_path / "misa").rows, expected.rows)
    assert diff.ok, diff.describe(expected.columns)
