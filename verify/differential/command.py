"""``misa fuzz``: random differential cases against plain Spark, each mismatch shrunk and saved as JSON."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from verify.differential.cases import Case, random_case
from verify.differential.deployments import Deployment, random_deployment
from verify.differential.processor import random_processor_case, run_processor_case
from verify.differential.queries import case_tags, random_query_case
from verify.differential.runner import Mismatch, Refused, run_case
from verify.differential.scenarios import Outcome, run_scenario
from verify.differential.shrink import shrink


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fuzz",
        help="random queries and streams (late rows, back-to-back batches, restarts, every key type) through misa "
        "and plain Spark, compared batch by batch; mismatches shrunk and saved",
    )
    parser.add_argument("--cases", type=int, default=50, help="random cases to run")
    parser.add_argument("--seed", type=int, default=0, help="the first case's seed (case i has seed SEED + i)")
    parser.add_argument("--work", default="runs/fuzz", help="folder for the runs' files and the failing cases")
    parser.add_argument(
        "--from-query",
        action="store_true",
        help="queries written in Spark's DataFrame API (windows with startTime, count(*), complete output, "
        "dropDuplicates, select/where after), run through misa.from_query",
    )
    parser.add_argument(
        "--processor",
        action="store_true",
        help="a StatefulProcessor (session-tracking fraud rule) through Spark's transformWithStateInPandas and "
        "misa's adapter",
    )
    parser.add_argument(
        "--deployments",
        action="store_true",
        help="queries as users deploy them, drawn independently of what misa runs (several sources, globs, "
        "subfolders, a Python source with a backlog, rate-micro-batch, two streams, static sides, unions, triggers "
        "once/availableNow/processing time, restarts): Spark's rows, or a refusal at start",
    )
    parser.add_argument(
        "--split-only",
        action="store_true",
        help="with --deployments: every case one stream split by filters into a join's sides or a union's branches "
        "(filters on the key, a side field, the value or the event time, above or below withWatermark; one read or "
        "a second read of the source)",
    )
    parser.add_argument(
        "--kafka-only",
        action="store_true",
        help="with --deployments: every case on Kafka topics of a broker started for the run (1-4 partitions, key "
        "skew, startingOffsets earliest or per partition, maxOffsetsPerTrigger or minOffsetsPerTrigger with "
        "maxTriggerDelay, the value decoded with from_json, Kafka's columns kept); a fresh topic per case",
    )
    parser.add_argument("--replay", help="run one saved case (a JSON file this command wrote) instead")
    parser.add_argument("--no-shrink", action="store_true", help="report mismatches without shrinking them")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the cases; exit status 1 if any mismatched."""
    work = Path(args.work)
    if args.deployments:
        seeds = range(args.seed, args.seed + args.cases)
        deployments = [random_deployment(s, args.split_only, args.kafka_only) for s in seeds]
        if not any(deployment.source == "kafka" for deployment in deployments):
            return run_deployments(local_session(), deployments, work)
        from services.kafka_broker import KafkaBroker
        from services.kafka_install import connector_jars, install_broker_jars, install_connector_jars

        install_broker_jars()
        install_connector_jars()
        with KafkaBroker() as broker:  # one broker for the run, a fresh topic per case and engine
            spark = local_session(jars=connector_jars())
            return run_deployments(spark, deployments, work, broker.bootstrap)
    spark = local_session()
    cases = [Case.from_json(Path(args.replay).read_text())] if args.replay else None
    seeds = range(args.seed, args.seed + args.cases)
    coverage: Counter = Counter()
    failures = 0
    started = time.monotonic()
    draw = random_processor_case if args.processor else random_query_case if args.from_query else random_case
    run_one = run_processor_case if args.processor else run_case
    refusals: Counter = Counter()
    for n, case in enumerate(cases or (draw(s) for s in seeds), 1):
        _count(coverage, case)
        mismatch = run_one(spark, case, work / "run")
        said = "same as Spark" if mismatch is None else str(mismatch)
        print(
            f"[{n}/{len(cases or seeds)} {time.monotonic() - started:.0f}s] {case.describe()}: "
            f"{'MISMATCH ' + said if isinstance(mismatch, Mismatch) else said}",
            flush=True,
        )
        if isinstance(mismatch, Refused):
            refusals[f"by {mismatch.by}: {mismatch.message[:160]}"] += 1
        if not isinstance(mismatch, Mismatch):
            continue
        failures += 1
        small = case if args.no_shrink or args.processor else shrink(spark, case, work / "run")
        saved = work / f"case-{case.seed}.json"
        saved.write_text(small.to_json())
        print(f"  saved ({small.files} files, {small.rows} rows): misa fuzz --replay {saved}", flush=True)
    print(
        f"{failures} of {len(cases or seeds)} cases mismatched, {sum(refusals.values())} refused at start; coverage: "
        + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items()))
    )
    for message, count in refusals.most_common():
        print(f"  refused {count}x {message}")
    return 1 if failures else 0


def run_deployments(spark: Any, deployments: list[Deployment], work: Path, bootstrap: str = "") -> int:
    """Random deployments (:mod:`verify.differential.deployments`; a Kafka case's topics on the broker at
    ``bootstrap``); exit status 1 if any mismatched. Each line names the case's shapes, its outcome (with the rows
    Spark wrote) and its time; the end counts every shape drawn, the outcomes per shape (``shape=outcome``), the
    cases where Spark wrote no row, and the refusals by message."""
    coverage: Counter = Counter()
    refusals: Counter = Counter()
    failures, started = 0, time.monotonic()
    for n, deployment in enumerate(deployments, 1):
        began = time.monotonic()
        try:
            # a folder per case: a Kafka case's topics are named by it, fresh for each case
            outcome = run_scenario(spark, deployment.scenario(bootstrap), work / "run" / str(deployment.seed))
        except Exception as error:  # noqa: BLE001 - the harness itself failed (a topic not made): a run failure
            outcome = Outcome(Mismatch(None, f"the run failed: {type(error).__name__}: {str(error)[:300]}"))
        finally:
            shutil.rmtree(work / "run" / str(deployment.seed), ignore_errors=True)
        coverage.update(deployment.tags)
        if outcome.refused:
            message = re.sub(r"#\d+|-T\d+ms|-[0-9a-f]{10}\b", "", outcome.message)  # no plan ids or topic hashes
            refusals[f"{outcome.refused}: {message[:160]}"] += 1
            kind = f"refused:{outcome.refused}"
        elif outcome.mismatch is None:
            kind = "same:no rows" if not outcome.spark_rows else "same:rows"
        else:
            kind = "mismatch"
        coverage[kind] += 1
        coverage.update(f"{tag}={kind}" for tag in deployment.tags if tag.startswith("kafka_"))
        failures += outcome.mismatch is not None
        said = f"same as Spark ({outcome.spark_rows} rows)"
        said = f"refused by {outcome.refused}: {outcome.message[:300]}" if outcome.refused else said
        said = f"MISMATCH {outcome.mismatch}" if outcome.mismatch else said
        took = time.monotonic() - began
        print(
            f"[{n}/{len(deployments)} {time.monotonic() - started:.0f}s +{took:.0f}s] {deployment.describe()}: {said}",
            flush=True,
        )
    counts = ", ".join(f"{k} {v}" for k, v in sorted(coverage.items()))
    print(f"{failures} of {len(deployments)} cases mismatched; coverage: {counts}")
    for message, count in refusals.most_common():
        print(f"  refused {count}x: {message}")
    return 1 if failures else 0


def _count(coverage: Counter, case: Case) -> None:
    q, s = case.query, case.settings
    coverage[f"processes:{s.processes}"] += 1
    coverage[f"placement:{s.placement}"] += 1
    coverage["above"] += q.above
    coverage["start_time"] += bool(q.start_s)
    if s.from_query:  # its tags name the form and count(*)
        coverage.update(case_tags(case))
    else:
        coverage[f"op:{q.operator}"] += 1
        coverage["count(*)"] += q.count_star
    coverage[f"mode:{q.output_mode}"] += 1
    coverage[f"commit:{s.commit_mode}"] += 1
    coverage[f"prefetch:{s.prefetching}"] += 1
    coverage[f"keys:{len(q.keys)}"] += 1
    for t in q.keys.values():
        coverage[f"type:{t}"] += 1
    coverage["restarts"] += len(case.rounds) - 1
    coverage["files"] += case.files


def local_session(app_name: str = "misa-fuzz", jars: list[str] | None = None):
    """A local[2] session for the differential runs and benchmarks that run in this process (UI and progress off);
    ``jars``: on ``spark.jars`` (Spark's Kafka connector)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.config("spark.jars", ",".join(jars)) if jars else SparkSession.builder
    spark = (
        builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    return spark
