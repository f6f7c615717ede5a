"""What the job benchmarks share: one spark-submit run of a job, its statistics, ratios and a table.

Latency is Spark's ``triggerExecution`` time of each batch (the ``latency_s`` of the metrics
records), the first ``warmup`` batches left out. Throughput counts the records of each batch's
input files (``batch_rows``), because Spark's numInputRows is taken after filter pushdown in
native mode and before it otherwise.

Each run keeps its output (the job's Parquet folder per batch id) and its Spark checkpoint, so that every runtime
mode's output is checked against the native mode's of the same group (:func:`check_against_native`,
:mod:`bench.same_output`) before a ratio is given: a row whose output differs, or whose peer's does, gets no
ratio, and the table says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from bench.same_output import Check, compare_runs
from jobs.submit import NATIVE_MODES
from misa.obs.report import load_metrics, summarize

ROOT = Path(__file__).resolve().parents[1]
SAME, DIFFERS = "same as native", "DIFFERS from native"  # a row's ``output``


def rows_per_batch(data: Path, files_per_batch: int) -> list[int]:
    """Input records of each batch when a run reads ``data``'s part files ``files_per_batch`` at a time."""
    per_file = [sum(1 for _ in f.open()) for f in sorted(data.glob("part-*.json"))]
    return [sum(per_file[i : i + files_per_batch]) for i in range(0, len(per_file), files_per_batch)]


def submit_command(
    script: str | Path, job_args: Sequence[str], conf: Sequence[str] = (), master: str = "local[2]"
) -> list[str]:
    """The spark-submit command line of ``jobs/<script>`` (or of ``script`` itself, an absolute path) for a benchmark
    run: ``master`` (local[2]), a 4 GB driver, 4 shuffle partitions, no UI, the project's log settings, then ``conf``
    (KEY=VALUE)."""
    cmd = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        master,
        "--driver-memory",
        "4g",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        "--conf",
        "spark.ui.showConsoleProgress=false",
        "--driver-java-options",
        f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}",
    ]
    for extra in conf:
        cmd += ["--conf", extra]
    return cmd + [str(ROOT / "jobs" / script), *job_args, "--quiet"]


def submit_env() -> dict[str, str]:
    """The environment of a benchmark run: this virtualenv's Python for the driver and the executors."""
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)


def submit(script: str, job_args: Sequence[str], conf: Sequence[str] = (), label: str = "") -> float:
    """Run ``jobs/<script>`` with :func:`submit_command`; its wall time in seconds."""
    started = time.monotonic()
    done = subprocess.run(submit_command(script, job_args, conf), env=submit_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{label or script} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return time.monotonic() - started


def batch_stats(metrics: Path, warmup: int, batch_rows: Sequence[int]) -> dict:
    """Batches, p50/p99 latency, busy throughput (input records over summed latency), max state keys.

    A single-batch run (a batch reference job) keeps its only batch whatever ``warmup`` says, and
    its input is all of ``batch_rows``.
    """
    records, _ = load_metrics(metrics)
    kept = records if len(records) == 1 else [r for r in records if r["batch_id"] >= warmup]
    if not kept:
        raise RuntimeError(f"{metrics}: no batches after the {warmup} warm-up batches")
    latency = summarize(kept)["latency_s"]
    input_rows = (
        sum(batch_rows)
        if len(records) == 1
        else sum(batch_rows[r["batch_id"]] for r in kept if r["batch_id"] < len(batch_rows))
    )
    return {
        "batches": len(kept),
        "p50": latency["p50"],
        "p99": latency["p99"],
        "rows_per_s": input_rows / sum(r["latency_s"] for r in kept),
        "state_keys": max((r.get("state_keys") or 0 for r in kept), default=0) or None,
    }


def check_against_native(
    rows: Sequence[dict], runs: dict[str, tuple[Path, Path]], keys: Sequence[str] | None = None
) -> dict[str, Check]:
    """Each runtime mode's output against the native mode's (``native``, else ``native-default``), ``runs`` being
    each mode's (output folder, Spark checkpoint) and ``rows`` their rows (by ``mode``): sets each compared row's
    ``output`` (:data:`SAME` or :data:`DIFFERS`) and ``output_rows``; the checks by mode (none without a native
    run). ``keys``: the query's key columns when its output is an update (for runs whose batches differ)."""
    reference = next((m for m in NATIVE_MODES if m in runs), None)
    if reference is None:
        return {}
    checks = {mode: compare_runs(run, runs[reference], keys) for mode, run in runs.items() if mode not in NATIVE_MODES}
    for row in rows:
        if row["mode"] in checks:
            check = checks[row["mode"]]
            row |= {"output": SAME if check.same else DIFFERS, "output_rows": check.misa_rows}
        elif row["mode"] == reference and checks:
            row["output_rows"] = next(iter(checks.values())).spark_rows
    return checks


def add_ratios(rows: list[dict], group: Sequence[str]) -> None:
    """``p99_vs_sync``, ``p99_vs_native`` and ``tput_vs_sync`` against the rows of the same ``group`` values; none
    for or against a row whose output differs from native's (:func:`check_against_native`)."""
    for row in rows:
        if row.get("output") == DIFFERS:
            continue
        peers = {r["mode"]: r for r in rows if all(r[g] == row[g] for g in group) and r.get("output") != DIFFERS}
        if "sync" in peers:
            row["p99_vs_sync"] = row["p99"] / peers["sync"]["p99"]
            row["tput_vs_sync"] = row["rows_per_s"] / peers["sync"]["rows_per_s"]
        if "native" in peers:
            row["p99_vs_native"] = row["p99"] / peers["native"]["p99"]


def markdown_table(rows: Sequence[dict], leading: Sequence[str]) -> str:
    """The rows as a Markdown table: the ``leading`` columns, then latency, throughput and ratios."""

    def ratio(row: dict, key: str) -> str:
        return f"{row[key]:.2f}" if key in row else "-"

    lines = [
        "| "
        + " | ".join(
            [
                *leading,
                "batches",
                "p50 (s)",
                "p99 (s)",
                "rows/s",
                "p99 / sync",
                "p99 / native",
                "rows/s / sync",
                "max state keys",
                "output",
            ]
        )
        + " |",
        "| " + " | ".join(["---"] * len(leading) + ["---:"] * 8 + ["---"]) + " |",
    ]
    for r in rows:
        cells = [str(r[c]) for c in leading] + [
            str(r["batches"]),
            f"{r['p50']:.2f}",
            f"{r['p99']:.2f}",
            f"{r['rows_per_s']:,.0f}",
            ratio(r, "p99_vs_sync"),
            ratio(r, "p99_vs_native"),
            ratio(r, "tput_vs_sync"),
            f"{r['state_keys']:,}" if r["state_keys"] else "n/a",
            r.get("output", "-"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
