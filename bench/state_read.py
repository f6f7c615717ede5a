"""``misa bench state-read``: how long reading a whole state through ``spark.read.format("misa-state")`` takes.

A state of ``--keys`` groups of ``groupBy(k).agg(count(*), sum(v))`` (an unwindowed :class:`Aggregation` over a long
key: one state row per key) is built through the operator's own ``apply`` and the commit in mode ``sync``, batches of
``--batch-keys`` new keys, and its operator is recorded as a job records it. A ``local[2]`` Spark session then reads
the newest version, every row decoded (the rows are counted and ``value.n`` summed, so each row's key and value are
built), ``--repeats`` times: one input partition per shard, read on Spark's Python workers from the DFS copy
(``file://`` here). CPU is the whole machine's (``/proc/stat``: run nothing else meanwhile), per key read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from common.location import local_location
from misa.config import MisaConfig
from misa.operators.aggregation import Agg, Aggregation
from misa.operators.base import ROWS
from misa.runtime.batch_cache import new_view
from misa.runtime.commit import CommitController
from misa.state.store import StateStore
from misa.state_source.operator_record import record_operator

SIGNATURE = {"operator": "Aggregation"}  # what operator.json says besides the pickle (the bench's own state)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("state-read", help="reading a whole state through format('misa-state'): time, CPU")
    p.add_argument("--keys", type=float, default=1e7, help="state rows (groups) to build and read")
    p.add_argument("--batch-keys", type=float, default=1e6, help="new keys per batch while building it")
    p.add_argument("--shards", type=int, default=4, help="spark.misa.state.shards (the read's input partitions)")
    p.add_argument("--repeats", type=int, default=2, help="reads of the same state")
    p.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temp dir, removed)")
    p.set_defaults(func=run)


def build_state(folder: Path, keys: int, batch_keys: int, shards: int) -> str:
    """The state's DFS location, after building it (see the module); prints progress on stderr."""
    config = MisaConfig.from_mapping({"spark.misa.state.shards": str(shards)})
    dfs_url = local_location(folder / "dfs").url
    operator = Aggregation(["k"], [Agg("n", "count", "*"), Agg("total", "sum", "v")])
    record_operator(dfs_url, operator, SIGNATURE)
    with StateStore(config, folder / "state", dfs_url) as store:
        view = new_view(store, config, operator)
        controller = CommitController(store, "sync")
        controller.loaded(-1)
        operator.restore({})
        for version, begin in enumerate(range(0, keys, batch_keys)):
            ids = np.arange(begin, min(keys, begin + batch_keys), dtype=np.int64)
            ones = np.ones(len(ids), np.int64)
            deltas = pa.table({"k": ids, ROWS: ones, "_v0": ones, "_c0": ones, "_v1": ids % 1000, "_c1": ones})
            operator.apply(deltas, view)
            controller.commit(view.freeze(version), operator.metadata())
            controller.finished()
            print(f"  state-read: {begin + len(ids):,} of {keys:,} keys committed", file=sys.stderr, flush=True)
        controller.close()
    return dfs_url


def _busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy so far (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def read_state(dfs_url: str, keys: int, repeats: int) -> list[dict]:
    """Each read's wall and machine CPU, and what it counted."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from misa.state_source.sources import register_state_sources

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    register_state_sources(spark)
    records = []
    try:
        for repeat in range(repeats):
            cpu, started = _busy_seconds(), time.perf_counter()
            rows, n = spark.read.format("misa-state").load(dfs_url).agg(F.count("*"), F.sum("value.n")).first()
            wall, cpu = time.perf_counter() - started, _busy_seconds() - cpu
            if rows != keys or n != keys:
                raise RuntimeError(f"read {rows} rows summing to {n}, expected {keys} of one row each")
            records.append(
                {"repeat": repeat, "keys": keys, "wall_s": round(wall, 1), "keys_per_s": round(keys / wall),
                 "machine_cpu_s": round(cpu, 1), "cpu_us_per_key": round(cpu / keys * 1e6, 2)}
            )  # fmt: skip
            print(json.dumps(records[-1]), flush=True)
    finally:
        spark.stop()
    return records


def run(args: argparse.Namespace) -> int:
    keys, batch_keys = int(args.keys), int(args.batch_keys)
    folder = args.work or Path(tempfile.mkdtemp(prefix="misa-state-read-"))
    try:
        started = time.perf_counter()
        dfs_url = build_state(folder, keys, batch_keys, args.shards)
        dfs_bytes = sum(f.stat().st_size for f in (folder / "dfs").rglob("*") if f.is_file())
        print(json.dumps({"built_s": round(time.perf_counter() - started), "dfs_mb": round(dfs_bytes / 2**20)}))
        read_state(dfs_url, keys, args.repeats)
    finally:
        if args.work is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0
