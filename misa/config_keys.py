"""The catalogue of MiSA's settings: every ``spark.misa.*`` key with its field, type, default, form and meaning.

:class:`Settings` declares them as the fields of a frozen dataclass, each made by :func:`setting`; the field's
metadata keeps the key, the default's text, the :class:`~misa.config_forms.Kind` and the one-line doc.
:class:`misa.config.MisaConfig` is that dataclass with its checks, derived settings and sources;
:func:`settings` lists the catalogue for the defaults file and the generated docs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable

from misa.config_forms import (
    BOOL,
    FRACTION,
    PREFETCH_MODE,
    PROCESSES,
    TEXT,
    Kind,
    choice,
    duration,
    integer,
    size,
)


class CommitMode(str, Enum):
    """How a version is committed (spark.misa.commit.mode); its value is the setting's text."""

    SYNC = "sync"  # the whole commit inline
    ASYNC_CKPT = "async-ckpt"  # only the DFS copy in the background
    MISA = "misa"  # all in the background
    NOCOMMIT = "nocommit"  # benchmarks only: applied to RocksDB in the background, nothing durable

    def __str__(self) -> str:
        return self.value


C_INT_MAX = 2**31 - 1  # the largest value of the RocksDB options that rocksdict takes as a C int


def setting(key: str, default: str, kind: Kind, doc: str) -> Any:
    """Declare one ``spark.misa.*`` setting as a dataclass field."""
    return field(default=kind.parse(default), metadata={"key": key, "default": default, "kind": kind, "doc": doc})


@dataclass(frozen=True)
class Settings:
    """Every MiSA setting, typed, in the order the defaults file and the docs list them; used as
    :class:`misa.config.MisaConfig`, which checks them."""

    state_dir: str = setting(
        "spark.misa.state.dir",
        "",
        TEXT,
        "Local directory for the working RocksDB shards and local checkpoints (jobs: --state-dir).",
    )
    state_shards: int = setting(
        "spark.misa.state.shards",
        "4",
        integer(1),
        "Number of RocksDB instances the state is split into (flush, checkpoint, upload run per shard).",
    )
    state_processes: int | None = setting(
        "spark.misa.state.processes",
        "auto",
        PROCESSES,
        "Worker processes of the state phase, each owning a key partition of the state (its RocksDB shards, "
        "cache and commit); 1 keeps the state in the driver's process. auto: the number the state was written "
        "with, or for a new state the driver's cores less one (at least 1, at most spark.misa.state.shards; 1 for an "
        "operator whose state does not split by key, such as from_query's chain of stateful operations). "
        "Fixed per state: another number needs new state locations.",
    )
    state_placement: str = setting(
        "spark.misa.state.placement",
        "driver",
        choice("driver", "executors"),
        "Where the state's key partitions live. driver: in the driver's worker processes (deltas are collected to "
        "the driver). executors: in long-lived state hosts on Spark's executors, one task slot each, run as a "
        "background job; deltas go from Spark's tasks to their host as Arrow Flight streams; a lost host's partition "
        "moves to a new host without failing the batch. With "
        "executors, spark.misa.state.processes is the number of hosts (auto: one per executor).",
    )
    state_liveness_timeout_s: float = setting(
        "spark.misa.state.livenessTimeout",
        "30s",
        duration(0, low_open=True, examples="10s, 30s or 2min"),
        "A state host (placement executors) or state worker process that does not answer a liveness check this "
        "long (hung, stopped, or its executor gone) is lost: a worker process fails the batch, naming it; a host's "
        "partition moves to a new host (spark.misa.state.hostMaxFailures).",
    )
    state_host_start_s: float = setting(
        "spark.misa.state.hostStartTimeout",
        "3min",
        duration(0, low_open=True, examples="1min, 3min or 10min"),
        "With placement executors: how long the start waits for the cluster to offer the hosts' task slots and for "
        "every host to start and report its address.",
    )
    state_host_output_driver_rows: int = setting(
        "spark.misa.state.hostOutputDriverRows",
        "100000",
        integer(0),
        "With placement executors: a batch's output of at most this many rows is fetched from the hosts by the driver "
        "and handed to the sink as a table, as in the driver placement; a larger output is written by the hosts "
        "themselves for a ParquetBatchSink (each host its rows' file; one sorted file by one host when the sink "
        "sorts), and goes to any other sink that writes DataFrames as a DataFrame Spark's tasks read from the hosts. "
        "0: always so.",
    )
    state_host_deltas_driver_rows: int = setting(
        "spark.misa.state.hostDeltasDriverRows",
        "1000000",
        integer(0),
        "With placement executors: after a batch of at most this many deltas, the next batch's deltas are collected "
        "by the driver and sent to the hosts from there, as the driver placement collects them (no Python worker in "
        "Spark's tasks); after a larger batch Spark's tasks send them to the hosts directly. 0: always the tasks.",
    )
    state_host_max_failures: int = setting(
        "spark.misa.state.hostMaxFailures",
        "4",
        integer(1),
        "With placement executors: how many times one partition's state host may be lost (its executor gone, or "
        "not answering a liveness check) within one batch; each loss moves only that partition to a new host, which "
        "catches up while the other hosts keep their state. One loss more fails the batch (as spark.task.maxFailures "
        "bounds a task's attempts).",
    )
    state_standby_replicas: int = setting(
        "spark.misa.state.standbyReplicas",
        "0",
        integer(0),
        "With placement executors: standby hosts per key partition, each on its own task slot. A standby applies "
        "every change its partition's host applies and keeps its own local checkpoints (it never writes to the "
        "DFS); when the host is lost, a standby takes over at once (it claims the partition, which fences the old "
        "host, and uploads its versions the DFS lacks) instead of a new host loading the newest durable version and "
        "redoing the batches since. Spark's task scheduling puts a standby on another executor than its host where "
        "one has a free slot. Needs state_hosts * (1 + this) + 1 task slots.",
    )
    state_retain_versions: int = setting(
        "spark.misa.state.retainVersions",
        "10",
        integer(2),
        "Committed versions kept on local disk and on the DFS; older ones are garbage-collected "
        "(at least 2: recovery may roll back one version).",
    )
    state_write_chunk: int = setting(
        "spark.misa.state.writeChunkSize",
        "5000",
        integer(1),
        "Operations per RocksDB WriteBatch (rocksdict holds the GIL while it writes one).",
    )
    commit_mode: CommitMode = setting(
        "spark.misa.commit.mode",
        CommitMode.MISA,
        choice(*CommitMode, to=CommitMode),
        "sync: whole commit inline; async-ckpt: only the DFS copy in the background; misa: all in the background; "
        "nocommit (benchmarks only): changes applied to RocksDB in the background, never flushed, checkpointed or "
        "uploaded, and no recovery.",
    )
    commit_wait_for_compaction: bool = setting(
        "spark.misa.commit.waitForCompaction",
        "false",
        BOOL,
        "Wait for running compactions before the local checkpoint (checkpoints are consistent without it).",
    )
    commit_heartbeat_timeout_s: float = setting(
        "spark.misa.commit.heartbeatTimeout",
        "5min",
        duration(0, low_open=True, examples="30s, 5min or 1h"),
        "A commit or upload thread silent this long (no file step) is presumed dead and its work is redone.",
    )
    commit_max_restarts: int = setting(
        "spark.misa.commit.maxRestarts",
        "3",
        integer(0),
        "Times the commit of one version is redone after its thread died or went silent; one more failure "
        "fails the batch with the cause (DFS errors that outlast their retries fail it at once).",
    )
    recovery_allow_previous: bool = setting(
        "spark.misa.recovery.allowPreviousVersion",
        "false",
        BOOL,
        "When the version recovery needs cannot be restored from either level, start from the newest older "
        "retained version that can, and make Spark replay the batches after it (its source must still hold them).",
    )
    dfs_url: str = setting(
        "spark.misa.checkpoint.dfsUrl",
        "",
        TEXT,
        "fsspec URL that durable versions are uploaded to: file://, s3://, gs://, abfs://, hdfs:// (jobs: --dfs).",
    )
    upload_threads: int = setting(
        "spark.misa.checkpoint.uploadThreads", "4", integer(1), "Files uploaded or downloaded in parallel."
    )
    mirror_spark_log: bool = setting(
        "spark.misa.checkpoint.mirrorSparkLog",
        "true",
        BOOL,
        "Spark writes its own checkpoint (offsets, commits, source logs) to a local copy under the state dir, "
        "and each version's upload mirrors it to the checkpoint location before its DFS marker (false: Spark "
        "writes the checkpoint location itself, and the batch waits for those writes).",
    )
    verify_reads: bool = setting(
        "spark.misa.checkpoint.verifyReads",
        "false",
        BOOL,
        "Read every uploaded file back and compare its SHA-256 (the size is always checked).",
    )
    retry_max_attempts: int = setting(
        "spark.misa.checkpoint.retry.maxAttempts",
        "5",
        integer(1),
        "Attempts per DFS operation before the commit fails with DfsUnavailableError.",
    )
    retry_initial_backoff_s: float = setting(
        "spark.misa.checkpoint.retry.initialBackoff",
        "200ms",
        duration(0),
        "First wait between DFS attempts; doubles each attempt.",
    )
    retry_max_backoff_s: float = setting(
        "spark.misa.checkpoint.retry.maxBackoff",
        "10s",
        duration(0),
        "Longest wait between two DFS attempts (at least the initial backoff).",
    )
    retry_jitter_s: float = setting(
        "spark.misa.checkpoint.retry.jitter",
        "200ms",
        duration(0),
        "Random extra wait added to each backoff, up to this much.",
    )
    rocksdb_write_buffer_bytes: int = setting(
        "spark.misa.rocksdb.writeBufferSize",
        "64m",
        size(64 << 10, 64 << 30),
        "Memtable size per shard before RocksDB flushes it to an L0 file (RocksDB would clip it to 64k..64g).",
    )
    rocksdb_max_write_buffers: int = setting(
        "spark.misa.rocksdb.maxWriteBufferNumber",
        "3",
        integer(2, C_INT_MAX),
        "Memtables per shard (one active, the rest flushing).",
    )
    rocksdb_l0_compaction_trigger: int = setting(
        "spark.misa.rocksdb.level0FileNumCompactionTrigger",
        "4",
        integer(1, C_INT_MAX),
        "Number of L0 files that starts a compaction.",
    )
    rocksdb_compression: str = setting(
        "spark.misa.rocksdb.compression",
        "lz4",
        choice("none", "snappy", "lz4", "zstd", "zlib"),
        "Block compression of SST files.",
    )
    rocksdb_block_cache_bytes: int = setting(
        "spark.misa.rocksdb.blockCacheSize", "64m", size(0), "Block cache shared by all shards (0: none)."
    )
    rocksdb_block_bytes: int = setting(
        "spark.misa.rocksdb.blockSize",
        "4k",
        size(1, 4 << 30, high_open=True, examples="4k, 16k or 64k"),
        "Data block size of SST files (RocksDB refuses 4g and more).",
    )
    rocksdb_bloom_bits: int = setting(
        "spark.misa.rocksdb.bloomFilterBitsPerKey",
        "10",
        integer(0, 100),
        "Bloom filter bits per key for point lookups; 0 disables the filter (RocksDB would cap it at 100).",
    )
    rocksdb_direct_reads: bool = setting(
        "spark.misa.rocksdb.useDirectReads",
        "false",
        BOOL,
        "Read SST files with O_DIRECT, bypassing the OS page cache (for honest cache benchmarks).",
    )
    rocksdb_background_jobs: int = setting(
        "spark.misa.rocksdb.maxBackgroundJobs",
        "2",
        integer(1, C_INT_MAX),
        "Background flush and compaction threads per shard.",
    )
    cache_policy: str = setting(
        "spark.misa.cache.policy",
        "auto",
        choice("auto", "tac", "lru", "clock", "none"),
        "State cache: tac (timestamp-aware: smallest event time first), lru or clock keep read entries across "
        "batches; none keeps only the batch's writes (reads go to RocksDB); auto is tac while prefetching is on, "
        "else none.",
    )
    cache_max_bytes: int = setting(
        "spark.misa.cache.maxBytes",
        "16m",
        size(1),
        "Read cache capacity (with a tac, lru or clock cache; the batch's writes are kept apart, never evicted). "
        "Size it to a few batches' keys: more costs Python bookkeeping and memory that RocksDB's block cache "
        "serves faster.",
    )
    memory_tier_max_bytes: int = setting(
        "spark.misa.state.memoryTier.maxBytes",
        "1g",
        size(0),
        "Memory for the state's memory tier, per key partition: the key spaces an operator looks up every batch (a "
        "deduplication's keys, tumbling windows' states, an interval join's buckets, a keyed join's right rows, a "
        "lookup aggregation's looked-up values) held whole in memory, so their reads need no RocksDB look-up; "
        "loaded in the background when a start has loaded the state, kept current by every batch, RocksDB still "
        "written in order. A space past this is dropped and read from RocksDB (a warning says so). 0: no memory tier.",
    )
    prefetch_mode: str = setting(
        "spark.misa.prefetch.enabled",
        "auto",
        PREFETCH_MODE,
        "Prefetch each batch's state keys into the state cache before the batch reads them: extracted ahead "
        "from its input as it arrives (nextBatch) or by a hint job one stage before the stateful one; false: "
        "fetch misses when read; auto: measured per batch, on where the state read is a large share of the "
        "batch and prefetching made it cheaper, else off (each batch's record says which and why); auto stays off "
        "with spark.misa.cache.policy=none.",
    )
    prefetch_next_batch: bool = setting(
        "spark.misa.prefetch.nextBatch",
        "true",
        BOOL,
        "With prefetching, when the job can read its source's arrived input ahead (a file source): between "
        "batches, while the driver waits for the trigger, extract the next batch's keys file by file as they "
        "arrive and skip that batch's own hint job; when nothing arrived in time, the batch extracts its own.",
    )
    prefetch_threads: int = setting(
        "spark.misa.prefetch.threads",
        "2",
        integer(1),
        "Threads fetching hinted keys from RocksDB (one multi-get per shard and chunk).",
    )
    prefetch_chunk_keys: int = setting(
        "spark.misa.prefetch.chunkKeys", "2048", integer(1), "Hinted keys per prefetch multi-get."
    )
    prefetch_sketch_depth: int = setting(
        "spark.misa.prefetch.sketch.depth",
        "4",
        integer(1),
        "Rows of the Count-Min sketch that finds hot keys (hot keys are cached anyway and not hinted).",
    )
    prefetch_sketch_width: int = setting(
        "spark.misa.prefetch.sketch.width",
        "65536",
        integer(16, 1 << 32),
        "Counters per row of the Count-Min sketch, rounded up to a power of two (a row is indexed by a 32-bit hash).",
    )
    prefetch_hot_threshold: int = setting(
        "spark.misa.prefetch.sketch.hotThreshold",
        "64",
        integer(1, 254),
        "A key is hot when all its sketch counters exceed this (counters saturate at 255).",
    )
    prefetch_aging_records: int = setting(
        "spark.misa.prefetch.sketch.agingRecords",
        "100000",
        integer(1),
        "The sketch halves its counters after this many records, so keys cool down.",
    )
    prefetch_auto_min_read_share: float = setting(
        "spark.misa.prefetch.auto.minReadShare",
        "0.1",
        FRACTION,
        "With prefetching auto: the share of a batch its state read must take (the most hints could hide), "
        "patience batches in a row, before prefetching is tried.",
    )
    prefetch_auto_min_device_read_bytes: int = setting(
        "spark.misa.prefetch.auto.minDeviceReadBytes",
        "256k",
        size(0),
        "With prefetching auto: what a batch's state reads must fetch from a device (Linux's /proc/self/io) "
        "before prefetching is tried; reads served from memory are CPU work that hints cannot hide.",
    )
    prefetch_auto_patience: int = setting(
        "spark.misa.prefetch.auto.patience",
        "3",
        integer(1, 1000),
        "With prefetching auto: batches in a row that must agree before prefetching is tried or turned off; "
        "a trial runs this many measured batches after one that warms the cache.",
    )
    prefetch_wasted_ratio: float = setting(
        "spark.misa.prefetch.wastedRatioThreshold",
        "0.5",
        FRACTION,
        "Adaptive lookahead: move hint extraction to the next declared stage when this share of prefetches "
        "is never read.",
    )
    metrics_prometheus_port: int = setting(
        "spark.misa.metrics.prometheusPort",
        "0",
        integer(0, 65535),
        "Port of the driver's Prometheus endpoint (/metrics, on every interface) with the runtime's per-batch "
        "metrics; 0: no endpoint. Needs the prometheus extra: pip install 'misa-pyspark[prometheus]'.",
    )

    python_switch_interval_s: float = setting(
        "spark.misa.python.switchInterval",
        "0.2ms",
        duration(1e-6, examples="0.2ms, 5ms or 1s"),
        "The driver's Python thread switch interval while a spark-submit job of jobs/ runs (Python's default is "
        "5ms; set by the entry point, not the library): how long a prefetch or commit thread whose I/O returned "
        "may wait for the GIL behind the batch's own Python work (Python counts it in whole microseconds).",
    )
    collect_max_items: int = setting(
        "spark.misa.aggregate.collectMaxItems",
        "10000",
        integer(1, C_INT_MAX),
        "collect_list / collect_set: the most items one group's list may hold; a batch that would grow a list "
        "past it fails naming the aggregate (nothing is dropped): raise it, or bound the group (a window).",
    )


def settings() -> Iterable[tuple[str, str, str, str]]:
    """(key, default text, expected form, doc) of every setting, in declaration order."""
    for f in dataclasses.fields(Settings):
        yield f.metadata["key"], f.metadata["default"], f.metadata["kind"].form, f.metadata["doc"]
