"""``misa bench ceiling``: what one delta costs the driver's state phase, per phase, as the state grows.

Spark computes each batch's deltas on the executors; the driver merges them into the state, emits the
output rows and commits. That part runs on the driver whatever the cluster's size, so its CPU per delta
is the ceiling of one query. Per shape (:mod:`bench.ceiling_shapes`) and state size, this preloads
a store with the shape's steady state (checkpointed and uploaded as version 0), then runs the shape's
real operator over ``--batches`` batches of deltas with Spark's columns, through the
:class:`~misa.state.view.StateView` (the runtime's read cache), the store and the
:class:`~misa.runtime.commit.CommitController` in mode ``sync``, so that every phase runs one after
another and the process's CPU time (all threads: RocksDB's multi-gets and compactions too) is
attributed to the phase running:

=================  =========================================================================
read               the operator's state reads (write buffer, cache, commit buffers, RocksDB)
merge              the operator's own work: keys, merging, windows (what is left of ``apply``)
output             building the batch's output rows
buffer             the operator's writes into the write buffer, and freezing it
write              the commit writing the buffer to RocksDB
checkpoint         flush and local checkpoint (ack 1)
upload             the copy to the DFS (``file://`` here) and its marker (ack 2)
=================  =========================================================================

A record per (shape, keys) gives CPU µs per delta per phase and in all, the same for the batch's thread alone
(the work that holds the GIL, so one process's ceiling however many cores it has; the rest is RocksDB on the
store's pool threads), wall deltas per second, the process's resident memory and the state's disk bytes. The
first ``--warmup`` batches are not measured.

This benchmark compares misa with itself only (its own earlier code, its settings, one process against several):
no Spark query runs, the deltas are generated (:mod:`bench.ceiling_shapes`), so there is no Spark output to
check misa's against (issue 61's check, :mod:`bench.same_output`, is for the benchmarks that compare the two).
Its Spark counterpart, ``misa bench spark-cpu``, does check its runs' output.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from bench.ceiling_shapes import SHAPES, Shape, shape
from common.location import local_location
from misa.config import MisaConfig
from misa.exceptions import ConfigError
from misa.hosts.send import Sending, send_rows
from misa.hosts.server import HostTables, Inbox, StateHostServer
from misa.operators.base import KeyPartitioned
from misa.parallel.routing import partition_of_rows, split
from misa.parallel.shared_arrow import share, take
from misa.runtime.batch_cache import new_view
from misa.runtime.commit import CommitController
from misa.runtime.process import gc_paused
from misa.state.store import StateStore

PHASES = ("read", "merge", "output", "buffer", "write", "checkpoint", "upload")
OUTPUT_METHODS = {  # the methods that build a shape's output rows
    "cm2-update": ("_window_output", "_output"),
    "cm2-append": ("_window_output", "_output"),
    "lr2": ("_pairs",),
    "q20": ("_pairs",),
    "ysb": ("_output",),
    "dedup": (),  # its output is a take of the batch's rows, inside its merge
    "session": ("_output",),
    "join": ("_output",),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ceiling", help="the driver's state phase: CPU per delta per phase, by state size")
    p.add_argument("--shape", default="cm2-update,lr2", help=f"comma-separated, from {', '.join(SHAPES)}")
    p.add_argument("--keys", default="1e6", help="comma-separated state sizes in keys (1e6,1e7,5e7)")
    p.add_argument("--deltas", type=float, default=1e5, help="deltas per batch")
    p.add_argument("--batches", type=int, default=5, help="measured batches")
    p.add_argument("--warmup", type=int, default=1, help="batches run first and not measured")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a spark.misa.* setting")
    p.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="run the shape as N key partitions in N processes at once (each keys/N and deltas/N), plus the cost "
        "of routing the deltas to them: what processes would give, measured without the runtime",
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temp dir, removed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    shapes = [s.strip() for s in args.shape.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"misa: error: --shape {','.join(unknown)}: use {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    try:
        sizes = [int(float(k)) for k in args.keys.split(",")]
        config = MisaConfig.from_mapping(dict(kv.split("=", 1) for kv in args.conf))
    except (ValueError, ConfigError) as exc:
        print(f"misa: error: --keys/--conf: {exc}", file=sys.stderr)
        return 2
    if args.partitions > 1 and any(not isinstance(shape(name, 1, 1).operator, KeyPartitioned) for name in shapes):
        print("misa: error: --partitions: the shape's operator does not split by key (ysb)", file=sys.stderr)
        return 2
    for name in shapes:
        for keys in sizes:
            scratch = Path(args.work or tempfile.mkdtemp(prefix="misa-ceiling-")) / f"{name}-{keys}"
            try:
                if args.partitions > 1:
                    record = measure_partitions(name, keys, config, scratch, args)
                else:
                    record = measure(shape(name, keys, int(args.deltas), args.seed), config, scratch, args)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            print(json.dumps(record), flush=True)
    return 0


class PhaseMeter:
    """Per phase: CPU seconds of the process (all threads) and of the calling thread (the batch's, which holds the
    GIL but while it waits for a pool), and wall seconds; nested phases count exclusively."""

    CLOCKS = (time.process_time, time.thread_time, time.perf_counter)

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.thread_cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self._stack: list[str] = []
        self._mark = (0.0, 0.0, 0.0)

    def _charge(self) -> None:
        now = tuple(clock() for clock in self.CLOCKS)
        if self._stack:
            for totals, begin, end in zip((self.cpu, self.thread_cpu, self.wall), self._mark, now):
                totals[self._stack[-1]] += end - begin
        self._mark = now  # type: ignore[assignment]

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._charge()
        self._stack.append(name)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    def wrap(self, owner: Any, method: str, name: str) -> None:
        """Charge every call of ``owner.method`` to phase ``name``."""
        original = getattr(owner, method)

        def metered(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(owner, method, metered)

    def reset(self) -> None:
        for totals in (self.cpu, self.thread_cpu, self.wall):
            totals.clear()

    def per_delta(self, totals: dict[str, float], deltas: int) -> dict[str, float]:
        """``totals`` per phase in µs per delta."""
        return {p: round(totals.get(p, 0.0) / deltas * 1e6, 2) for p in PHASES}


def measure(
    bench: Shape, config: MisaConfig, scratch: Path, args: argparse.Namespace, ready: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """Preload ``bench``'s state, run its batches and return the record (``ready`` is called between the two)."""
    with StateStore(config, scratch / "state", local_location(scratch / "dfs").url) as store:
        started = time.monotonic()
        preload(bench, store)
        preload_s = time.monotonic() - started
        if ready is not None:
            ready()
        keys_before = store.approximate_keys()
        operator = bench.operator
        view = new_view(store, config, operator)
        controller = CommitController(store, "sync")
        controller.loaded(0)
        operator.restore(bench.metadata)
        meter = PhaseMeter()
        for method, phase in [
            ("get_many", "read"),
            ("scan", "read"),
            ("put_many", "buffer"),
            ("delete_range", "buffer"),
        ]:
            meter.wrap(view, method, phase)
        for method, phase in [("apply", "write"), ("checkpoint", "checkpoint")]:
            meter.wrap(store, method, phase)
        meter.wrap(store.checkpoints, "upload", "upload")
        inner = getattr(operator, "aggregation", operator)
        for method in OUTPUT_METHODS[bench.name]:
            meter.wrap(inner, method, "output")
        deltas = outputs = 0
        wall = 0.0
        for number in range(args.warmup + args.batches):
            if number == args.warmup:
                meter.reset()
                deltas = outputs = 0
                wall = 0.0
            batch = bench.batch(number)
            begin = time.perf_counter()
            with gc_paused():
                with meter.phase("merge"):
                    result = operator.apply(batch, view)
                with meter.phase("buffer"):
                    frozen = view.freeze(number + 1)
            with meter.phase("commit"):
                controller.commit(frozen, operator.metadata())
            wall += time.perf_counter() - begin
            deltas += batch.num_rows
            outputs += result.output.num_rows
            controller.finished()
            total = args.warmup + args.batches
            print(f"  {bench.name} {bench.keys:,} keys: batch {number + 1} of {total}", file=sys.stderr, flush=True)
        controller.close()
        return {
            "shape": bench.name,
            "keys": bench.keys,
            "state_keys_before": keys_before,
            "state_keys_after": store.approximate_keys(),
            "batches": args.batches,
            "deltas": deltas,
            "output_rows_per_delta": round(outputs / deltas, 2),
            "cpu_us_per_delta": round(sum(meter.cpu.values()) / deltas * 1e6, 2),
            "phases_cpu_us_per_delta": meter.per_delta(meter.cpu, deltas),
            "batch_thread_cpu_us_per_delta": round(sum(meter.thread_cpu.values()) / deltas * 1e6, 2),
            "phases_batch_thread_cpu_us_per_delta": meter.per_delta(meter.thread_cpu, deltas),
            "unattributed_cpu_us_per_delta": round(meter.cpu.get("commit", 0.0) / deltas * 1e6, 2),
            "wall_deltas_per_s": round(deltas / wall),
            "wall_s": round(wall, 3),
            "rss_mb": round(_rss_bytes() / 2**20),
            "disk_mb": round(_du(scratch / "state") / 2**20),
            "preload_s": round(preload_s, 1),
            "shards": store.shards,
        }


def measure_partitions(name: str, keys: int, config: MisaConfig, scratch: Path, args: argparse.Namespace) -> dict:
    """The shape as ``args.partitions`` key partitions, each in its own process with its own store, their measured
    batches started together; and the driver's cost of routing the whole shape's deltas to them."""
    context = multiprocessing.get_context("spawn")
    parts = args.partitions
    barrier, results = context.Barrier(parts), context.Queue()
    workers = [
        context.Process(
            target=_measure_partition,
            args=(name, keys // parts, int(args.deltas) // parts, args.seed + i, config, scratch / f"part-{i}"),
            kwargs={"args": args, "barrier": barrier, "results": results},
        )
        for i in range(parts)
    ]
    for worker in workers:
        worker.start()
    records = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    deltas = sum(r["deltas"] for r in records)
    cpu = sum(r["cpu_us_per_delta"] * r["deltas"] for r in records) / deltas
    whole = shape(name, keys, int(args.deltas), args.seed)
    routing = routing_cost(whole, parts, args.batches)
    transport = transport_cost(whole, parts, args.batches)
    return {
        "shape": name,
        "keys": keys,
        "partitions": parts,
        "deltas": deltas,
        "wall_deltas_per_s": round(deltas / max(r["wall_s"] for r in records)),
        "cpu_us_per_delta": round(cpu, 2),
        "routing_cpu_us_per_delta": routing,
        "transport_cpu_us_per_delta": transport,
        # the state on the executors against the driver's workers: the same partition's work, plus the transport
        # (both its ends, so an upper bound of a host's share) instead of the routing through shared memory
        "host_over_worker": round((cpu + transport) / (cpu + routing), 3),
        "transport_share": round(transport / cpu, 3),
        "per_partition": records,
    }


def _measure_partition(
    name: str, keys: int, deltas: int, seed: int, config: MisaConfig, scratch: Path, *, args, barrier, results
) -> None:
    try:
        results.put(measure(shape(name, keys, deltas, seed), config, scratch, args, barrier.wait))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def routing_cost(bench: Shape, partitions: int, batches: int) -> float:
    """CPU µs per delta of the driver's routing of each batch to ``partitions`` worker processes, as the runtime does
    it (:class:`misa.parallel.partitioned.PartitionedOperator`): each row's partition from the operator's partition
    keys, the rows split per partition and put in shared memory, and taken out there as a worker does."""
    cpu = 0.0
    rows = 0
    operator = bench.operator
    for number in range(batches):
        batch = bench.batch(number)
        started = time.process_time()
        partition = partition_of_rows(operator.partition_key_reader()(batch), batch.num_rows, partitions)
        for part in split(batch, partition, partitions):
            take(share(part))
        cpu += time.process_time() - started
        rows += batch.num_rows
    return round(cpu / rows * 1e6, 3)


#: rows per Arrow batch a Spark task hands mapInArrow (spark.sql.execution.arrow.maxRecordsPerBatch's default)
SPARK_ARROW_BATCH = 10_000


def transport_cost(bench: Shape, hosts: int, batches: int) -> float:
    """CPU µs per delta of the transport of the state on the executors (:mod:`misa.hosts.send`), both ends in this
    process: a task casts its rows, splits them by key partition and streams them over Arrow Flight (loopback) to
    ``hosts`` hosts, which put them in their inboxes and take them out as a batch's merge does."""
    key = b"bench"
    tables = [HostTables() for _ in range(hosts)]
    servers = [StateHostServer("grpc+tcp://127.0.0.1:0", None, t, key) for t in tables]
    locations = tuple((f"grpc+tcp://127.0.0.1:{server.port}",) for server in servers)  # each partition: its host
    cpu, rows = 0.0, 0
    try:
        for number in range(batches):
            batch = bench.batch(number)
            schema = batch.schema.serialize().to_pybytes()
            sending = Sending(locations, key, uuid.uuid4().hex, schema, bench.operator.partition_key_reader())
            started = time.process_time()
            sent = send_rows(sending, 0, 0, iter(batch.to_batches(SPARK_ARROW_BATCH)))
            for host in sent.column("host").to_pylist():
                tables[host].take(Inbox(sending.token, ((0, 0),), schema))
            cpu += time.process_time() - started
            rows += batch.num_rows
    finally:
        for server in servers:
            server.shutdown()
    return round(cpu / rows * 1e6, 3)


def preload(bench: Shape, store: StateStore) -> None:
    """Write the shape's steady state, compact it, checkpoint and upload it as version 0."""
    written = 0
    for keys, values in bench.preload():
        store.write(zip(keys, values))
        written += len(keys)
        print(f"  {bench.name}: preloaded {written:,} entries", file=sys.stderr, flush=True)
    store.flush()
    store.compact()
    store.checkpoint(0, bench.metadata)
    store.checkpoints.upload_and_retain(0)


def _rss_bytes() -> int:
    """The process's resident memory now (after the measured batches)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
