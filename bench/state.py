"""``misa bench state``: replay state-access streams against RocksDB behind each cache policy.

One store is preloaded with the workload's state (at least 10x the cache) and checkpointed as
version 0; each policy gets its own store restored from that checkpoint and replays the same
batches (same seed), the first ``--warmup`` of them unmeasured while its cache fills. The policies
take turns batch by batch, so the machine's slow spells fall on all of them alike.
Per batch the replay does what the runtime does: hints reach the prefetch manager when the batch
starts (``tac`` only), Spark's computation of the batch is stood in for by ``--compute-ms`` of
waiting (the same for every policy), then the batch reads its keys (timed: the state-read
latency), writes them back, closes windows (these three with the cyclic garbage collector paused, as
in the runtime), and its changes are applied to RocksDB and flushed, as the runtime's commit does
before its checkpoint (without the flush, the memtable would hold every change of the run and the
windows' range deletes, and reads would slow down with it instead of reading SST files).

Policies: ``tac`` (timestamp-aware cache, keyed prefetching; the read fetches the chunks of hinted
keys no prefetch thread has started yet itself, alongside the pool, as in the runtime), ``lru`` and ``clock`` (fetch
on miss, shards one after another on the batch's thread), ``async`` (LRU, misses fetched with the
shards in parallel on the pool, no hints). RocksDB reads bypass the OS page cache (direct reads) and its
block cache is small, so a miss costs real I/O.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.state_workloads import DISTRIBUTIONS, WORKLOADS, BatchAccesses, KeyStream, StateWorkload
from common.location import local_location
from misa.config import MisaConfig
from misa.config_forms import parse_bytes
from misa.exceptions import ConfigError
from misa.runtime.batch_cache import attach_prefetcher
from misa.runtime.process import gc_paused, switch_interval
from misa.state.store import StateStore
from misa.state.view import StateView
from prefetch.cache import ENTRY_OVERHEAD, StateCache

POLICIES = ("tac", "lru", "clock", "async")
VALUE_BYTES = 32


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("state", help="state-read latency per cache policy on Gadget-style access streams")
    p.add_argument("--workload", choices=WORKLOADS, default="aggregation")
    p.add_argument("--keys", choices=DISTRIBUTIONS, default="zipf", help="key distribution")
    p.add_argument("--policy", default="tac", help=f"comma-separated, from {', '.join(POLICIES)}")
    p.add_argument("--key-space", type=float, default=2e5, help="distinct keys")
    p.add_argument("--batches", type=int, default=300, help="measured batches")
    p.add_argument("--warmup", type=int, default=20, help="batches replayed first and not measured (the cache fills)")
    p.add_argument("--batch-records", type=int, default=2000)
    p.add_argument("--seconds-per-batch", type=float, default=1.0, help="event time covered by a batch")
    p.add_argument("--compute-ms", type=float, default=20.0, help="the batch's Spark time, while hints prefetch")
    p.add_argument("--cache-bytes", default="1m")
    p.add_argument("--skew", type=float, default=1.0, help="Zipf exponent")
    p.add_argument(
        "--window-s",
        type=int,
        default=None,
        help="tumbling/sliding window length in seconds (default: tumbling 600, sliding 300)",
    )
    p.add_argument("--slide-s", type=int, default=None, help="sliding windows' slide in seconds (default 100)")
    p.add_argument(
        "--switch-interval",
        default=None,
        help="Python's thread switch interval for every policy (default: spark.misa.python.switchInterval)",
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--work", type=Path, default=None, help="state directory (default: a temp dir)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    policies = list(dict.fromkeys(p.strip() for p in args.policy.split(",")))
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(f"misa: error: --policy {','.join(unknown)}: use {', '.join(POLICIES)}", file=sys.stderr)
        return 2
    try:
        preloaded = build_workload(args)  # checks the window options; its stream makes the preloaded state
    except ValueError as exc:
        print(f"misa: error: --window-s/--slide-s: {exc}", file=sys.stderr)
        return 2
    try:
        cache_bytes = parse_bytes(args.cache_bytes)
    except ValueError:
        print(
            f"misa: error: --cache-bytes {args.cache_bytes!r}: use a size such as 1m, 512k or 1048576", file=sys.stderr
        )
        return 2
    settings = {"spark.misa.rocksdb.useDirectReads": "true", "spark.misa.rocksdb.blockCacheSize": "1m"}
    if args.switch_interval is not None:
        settings["spark.misa.python.switchInterval"] = args.switch_interval
    try:
        config = MisaConfig.from_mapping(settings)
    except ConfigError as exc:
        print(f"misa: error: --switch-interval: {exc}", file=sys.stderr)
        return 2
    scratch = Path(args.work or tempfile.mkdtemp(prefix="misa-bench-state-"))
    try:
        with ExitStack() as stack:
            stack.enter_context(switch_interval(config.python_switch_interval_s))
            stores, state_keys = open_stores(config, scratch, policies, preloaded, stack)
            for record in replay(stores, build_workload(args), args, state_keys, cache_bytes):
                print(json.dumps(record), flush=True)
    finally:
        if not args.work:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


def build_workload(args: argparse.Namespace) -> StateWorkload:
    """The workload the command line describes (the same batches every time for one seed)."""
    rng = np.random.default_rng(args.seed)
    key_space = int(args.key_space)
    keys = KeyStream(args.keys, key_space, rng, skew=args.skew)
    return StateWorkload(
        args.workload, keys, key_space, args.batch_records, args.seconds_per_batch, rng, args.window_s, args.slide_s
    )


def open_stores(
    config: MisaConfig, scratch: Path, policies: Sequence[str], workload: StateWorkload, stack: ExitStack
) -> tuple[dict[str, StateStore], int]:
    """One store per policy, each holding the preloaded state (version 0); closed with ``stack``.

    Returns the stores by policy and the preloaded key count.
    """
    dfs = local_location(scratch / "dfs").url
    first = stack.enter_context(StateStore(config, scratch / f"state-{policies[0]}", dfs))
    state_keys = preload(first, workload)
    first.checkpoints.upload_and_retain(0)
    first.load(0)  # reopened from the checkpoint, as the others are
    stores = {policies[0]: first}
    for policy in policies[1:]:
        stores[policy] = stack.enter_context(StateStore(config, scratch / f"state-{policy}", dfs))
        stores[policy].load(0)
    return stores, state_keys


def preload(store: StateStore, workload: StateWorkload) -> int:
    """Write the initial state, compact it and checkpoint it as version 0; returns its key count."""
    count = 0
    value = bytes(VALUE_BYTES)
    for keys in workload.preload():
        store.write((k, value) for k in keys)
        count += len(keys)
    store.flush()
    store.compact()
    store.checkpoint(0)
    return count


def replay(
    stores: dict[str, StateStore], workload: StateWorkload, args: argparse.Namespace, state_keys: int, cache_bytes: int
) -> list[dict]:
    """Replay ``workload`` behind each policy on its store; returns one JSON record per policy.

    The policies take turns batch by batch (in an order that rotates), so a slow spell of this
    machine falls on all of them alike instead of on whichever policy happens to run then.
    """
    runs = [PolicyReplay(policy, store, cache_bytes) for policy, store in stores.items()]
    sample_every = max(1, args.batches // 10)
    try:
        for version, batch in enumerate(workload.batches(args.warmup + args.batches), start=1):
            turn = version % len(runs)
            for run in runs[turn:] + runs[:turn]:
                run.run_batch(version, batch, args.compute_ms / 1000)
            for run in runs:
                if version == args.warmup:  # the cache is warm: measure from here
                    run.restart()
                elif version > args.warmup and (version - args.warmup) % sample_every == 0:
                    run.sample_state()
    finally:
        for run in runs:
            run.close()
    return [run.record(args, workload, state_keys) for run in runs]


class PolicyReplay:
    """One policy's side of the replay: its cache and view over its own store, and its measurements."""

    def __init__(self, policy: str, store: StateStore, cache_bytes: int):
        self.policy = policy
        self.store = store
        self.cache = StateCache(cache_bytes, "lru" if policy == "async" else policy)
        self.view = StateView(store, self.cache, parallel_misses=policy == "async")
        self.prefetcher = attach_prefetcher(self.view, store.shards, 256, cache_bytes) if policy == "tac" else None
        self.live_keys: list[int] = []  # the state's key count, sampled over the measured batches
        self.restart()

    def restart(self) -> None:
        """Forget the batches measured so far (the warm-up is over)."""
        self.read_s: list[float] = []
        self.batch_s: list[float] = []
        self.records = self.hits = self.reads = 0

    def run_batch(self, version: int, batch: BatchAccesses, compute_s: float) -> None:
        """What the runtime does with one batch: hints, compute, state read (timed), writes, commit."""
        started = time.monotonic()
        if self.prefetcher is not None:
            self.prefetcher.hint(batch.keys, batch.ts)
        time.sleep(compute_s)
        view, stamps = self.view, batch.ts.tolist()
        with gc_paused():
            before = time.monotonic()
            values = view.get_many(batch.keys, stamps)
            self.read_s.append(time.monotonic() - before)
            view.put_many(batch.keys, [_bump(v, version) for v in values])
            if batch.close_before:
                view.delete_range(b"", batch.close_before)
        frozen = view.freeze(version)
        frozen.hand_over()  # what the commit does, inline: the version is in RocksDB before the next batch
        self.store.apply(frozen.buffer.changes, frozen.buffer.range_deletes)
        frozen.applied()
        self.store.flush()  # as the commit's checkpoint does: reads go to SST files, not an ever-growing memtable
        self.batch_s.append(time.monotonic() - started)
        self.records += batch.records
        stats = self.cache.stats.take()
        self.hits += stats["hits"]
        self.reads += stats["hits"] + stats["misses"]
        if self.prefetcher is not None:
            self.prefetcher.take_stats()

    def sample_state(self) -> None:
        """Count the state's keys now (for the record's state-to-cache ratio)."""
        self.live_keys.append(self.store.count_keys())

    def close(self) -> None:
        """Stop the view's prefetching; the store stays open."""
        self.view.close()

    def record(self, args: argparse.Namespace, workload: StateWorkload, state_keys: int) -> dict:
        """The policy's JSON record: per-batch state-read percentiles, throughput, hit ratio, state size."""
        latencies = np.array(self.read_s) * 1000
        entry_bytes = workload.key_bytes + VALUE_BYTES + ENTRY_OVERHEAD  # as the cache counts an entry
        live_keys = self.live_keys or [self.store.count_keys()]
        cache_bytes = self.cache.max_bytes
        return {
            "workload": args.workload,
            "keys": args.keys,
            "policy": self.policy,
            "batches": len(self.read_s),
            "batch_records": args.batch_records,
            "key_space": workload.key_space,
            "preloaded_keys": state_keys,
            "state_keys_mean": round(float(np.mean(live_keys))),
            "state_keys_min": min(live_keys),
            "cache_bytes": cache_bytes,
            "state_to_cache": round(float(np.mean(live_keys)) * entry_bytes / cache_bytes, 1),
            "state_to_cache_min": round(min(live_keys) * entry_bytes / cache_bytes, 1),
            "read_ms": {
                q: round(float(np.percentile(latencies, p)), 3) for q, p in (("p50", 50), ("p99", 99), ("p99.9", 99.9))
            },
            "read_ms_mean": round(float(latencies.mean()), 3),
            "throughput_rps": round(self.records / sum(self.batch_s), 1),
            "state_rps": round(self.records / sum(b - args.compute_ms / 1000 for b in self.batch_s), 1),
            "hit_ratio": round(self.hits / self.reads, 4) if self.reads else None,
            "switch_interval_ms": round(sys.getswitchinterval() * 1000, 3),
        }


def _bump(old: bytes | None, version: int) -> bytes:
    """The new value of a key: a counter in the first 8 bytes, the batch in the next 8."""
    count = int.from_bytes(old[:8], "big") + 1 if old else 1
    return count.to_bytes(8, "big") + version.to_bytes(8, "big") + bytes(VALUE_BYTES - 16)
