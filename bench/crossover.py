"""``misa bench crossover``: from the driver's ceiling and Spark's CPU per record, the cluster size past which Spark's
own state store is faster than one misa query.

Inputs: the records of ``misa bench ceiling`` (the driver's CPU per delta at one state size: of all threads, T,
and of the batch's thread, G, which holds the GIL) and of ``misa bench spark-cpu`` (Spark's executor CPU per input
record in native mode, S, and misa's deltas per input record, d). Per query, on a driver of ``c`` cores:

* one misa process sustains ``R = min(1 / (G d), c / (T d))`` records a second: its batch thread is serial, the
  rest (RocksDB reads on the store's pool, flushes) runs on the other cores;
* ``n`` executor cores of Spark's own store sustain ``n / S``, so Spark overtakes that query at ``n* = R S``
  executor cores; misa's own Spark part needs ``R s`` of them (``s``: its executor CPU per record).

With the state on the executors (``spark.misa.state.placement=executors``, ``--executors E --executor-cores C``, one
state host per executor) the state phase runs on the same cores as the query's Spark part. Per record misa spends
``m = s + d (T + t)`` executor CPU (``t``: the transport's CPU per delta, both ends, from ``ceiling --partitions``),
so ``E C`` cores sustain ``R = min(E C / m, E / (G d))`` (each host's batch thread is serial) and keep ``R m`` of them
busy, and Spark's store needs ``R S`` cores for that rate: ``S / m`` times the cores misa keeps busy.

Assumptions (the measurement's, docs/benchmarks.md): the state phase is CPU-bound (state in memory or on fast
local disk), its cost per delta does not depend on the rate, Spark's executor CPU scales linearly with
executors, and the deltas' transfer to the driver (JVM work) is not counted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SHAPE_OF_QUERY = {"cm2": "cm2-update", "lr2": "lr2", "q20": "q20"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("crossover", help="executor cores past which Spark's own store outruns one misa query")
    p.add_argument("--ceiling", type=Path, required=True, help="misa bench ceiling's records (JSON lines)")
    p.add_argument("--spark", type=Path, required=True, help="misa bench spark-cpu's records (JSON lines)")
    p.add_argument("--keys", type=float, default=None, help="the ceiling's state size to use (default: the largest)")
    p.add_argument("--driver-cores", default="2,16,32", help="comma-separated driver sizes")
    p.add_argument(
        "--executors",
        default="",
        help="comma-separated executor counts: model the state on the executors too (needs ceiling --partitions "
        "records, which measure the transport)",
    )
    p.add_argument("--executor-cores", type=int, default=8, help="cores per executor (with --executors)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ceiling = [json.loads(line) for line in args.ceiling.read_text().splitlines() if line.strip()]
    spark = [json.loads(line) for line in args.spark.read_text().splitlines() if line.strip()]
    cores = [int(c) for c in args.driver_cores.split(",")]
    for row in crossovers(ceiling, spark, cores, int(args.keys) if args.keys else None):
        print(json.dumps(row))
    executors = [int(e) for e in args.executors.split(",") if e.strip()]
    for row in on_executors(ceiling, spark, executors, args.executor_cores, int(args.keys) if args.keys else None):
        print(json.dumps(row))
    return 0


def _measured(ceiling: list[dict], spark: list[dict], query: str, keys: int | None) -> tuple[dict, dict, dict] | None:
    """The query's Spark records (native, misa) and its ceiling record (at ``keys``, else the largest state)."""
    native = next((r for r in spark if r["query"] == query and r["mode"] == "native"), None)
    misa = next((r for r in spark if r["query"] == query and r["mode"] == "misa"), None)
    shape = SHAPE_OF_QUERY[query]
    measured = [
        r for r in ceiling if r["shape"] == shape and "partitions" not in r and (keys is None or r["keys"] == keys)
    ]
    if native is None or misa is None or not measured:
        return None
    return native, misa, max(measured, key=lambda r: r["keys"])


def on_executors(
    ceiling: list[dict], spark: list[dict], executors: list[int], cores: int, keys: int | None
) -> list[dict]:
    """One row per query (with every measurement, the transport's included) and executor count: the rate of one
    query with its state on ``executors`` executors of ``cores`` cores, and the cores Spark's store needs for it."""
    rows = []
    for query, shape in SHAPE_OF_QUERY.items():
        found = _measured(ceiling, spark, query, keys)
        transports = [r["transport_cpu_us_per_delta"] for r in ceiling if r["shape"] == shape and "partitions" in r]
        if found is None or not transports:
            continue
        native, misa, state = found
        d = misa["deltas_per_record"]
        per_delta = state["cpu_us_per_delta"] + max(transports)
        misa_us = misa["executor_cpu_us_per_record"] + d * per_delta
        for e in executors:
            rate = min(e * cores * 1e6 / misa_us, e * 1e6 / (d * state["batch_thread_cpu_us_per_delta"]))
            spark_cores = rate * native["executor_cpu_us_per_record"] / 1e6
            misa_cores = rate * misa_us / 1e6  # what misa keeps busy (less than E C when host threads bound it)
            rows.append(
                {
                    "query": query,
                    "placement": "executors",
                    "state_keys": state["keys"],
                    "executors": e,
                    "executor_cores": cores,
                    "misa_cpu_us_per_record": round(misa_us, 2),
                    "transport_cpu_us_per_delta": max(transports),
                    "records_per_s": round(rate),
                    "spark_native_cpu_us_per_record": native["executor_cpu_us_per_record"],
                    "misa_executor_cores_busy": round(misa_cores, 1),
                    "spark_executor_cores_for_that_rate": round(spark_cores, 1),
                    "spark_cores_over_misa_cores": round(spark_cores / misa_cores, 2),
                }
            )
    return rows


def crossovers(ceiling: list[dict], spark: list[dict], cores: list[int], keys: int | None) -> list[dict]:
    """One row per query (with both measurements) and driver size: the model's rate and crossover."""
    rows = []
    for query in SHAPE_OF_QUERY:
        found = _measured(ceiling, spark, query, keys)
        if found is None:
            continue
        native, misa, driver = found
        per_record = misa["deltas_per_record"]
        all_threads = driver["cpu_us_per_delta"] * per_record
        batch_thread = driver["batch_thread_cpu_us_per_delta"] * per_record
        for c in cores:
            rate = min(1e6 / batch_thread, c * 1e6 / all_threads)
            rows.append(
                {
                    "query": query,
                    "state_keys": driver["keys"],
                    "driver_cores": c,
                    "driver_cpu_us_per_record": round(all_threads, 2),
                    "batch_thread_cpu_us_per_record": round(batch_thread, 2),
                    "records_per_s": round(rate),
                    "spark_native_cpu_us_per_record": native["executor_cpu_us_per_record"],
                    "crossover_executor_cores": round(rate * native["executor_cpu_us_per_record"] / 1e6, 1),
                    "misa_spark_part_executor_cores": round(rate * misa["executor_cpu_us_per_record"] / 1e6, 1),
                }
            )
    return rows
