"""The one typed, validated, immutable configuration of MiSA, built from ``spark.misa.*`` keys.

Sources: a Spark session (what the jobs read when given no ``config=``), a SparkConf (``--conf`` /
``--properties-file``), a plain mapping, or a Spark properties file. An unknown ``spark.misa.*`` key, a
malformed value, or a number outside its key's range raises :class:`ConfigError` naming the key, the value
and the expected form with its range, when the configuration is built (also for typed values given to
:meth:`MisaConfig.with_values`). ``conf/misa-defaults.conf`` is :func:`defaults_file_text` written out.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from checkpoint import RetryPolicy
from misa.exceptions import ConfigError

PREFIX = "spark.misa."


class CommitMode(str, Enum):
    """How a version is committed (spark.misa.commit.mode); its value is the setting's text."""

    SYNC = "sync"  # the whole commit inline
    ASYNC_CKPT = "async-ckpt"  # only the DFS copy in the background
    MISA = "misa"  # all in the background
    NOCOMMIT = "nocommit"  # benchmarks only: applied to RocksDB in the background, nothing durable

    def __str__(self) -> str:
        return self.value


C_INT_MAX = 2**31 - 1  # the largest value of the RocksDB options that rocksdict takes as a C int
STATE_FOLDER = "misa-state"  # the default place of the state's DFS copy: <checkpoint location>/misa-state
MAX_WAIT_S = 1000 * 3600.0  # the longest duration: below every platform's threading.TIMEOUT_MAX (Windows: 1193 h)


@dataclass(frozen=True)
class Bounds:
    """The range a numeric setting must lie in: ``low`` to ``high`` (None: no upper limit), each end
    included unless ``low_open`` / ``high_open``."""

    low: float
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below  # NaN is neither

    def describe(self, show: Callable[[Any], str]) -> str:
        """The range in words, its ends written by ``show``: ``>= 1``, ``from 64k to 64g``, ``> 0s and <= 1000h``."""
        low = f"{'>' if self.low_open else '>='} {show(self.low)}"
        if self.high is None:
            return low
        if not (self.low_open or self.high_open):
            return f"from {show(self.low)} to {show(self.high)}"
        return f"{low} and {'<' if self.high_open else '<='} {show(self.high)}"


@dataclass(frozen=True)
class Kind:
    """How a setting's text is parsed, the range a numeric value must lie in, and the form shown when it is wrong."""

    noun: str  # "an integer", "a size", "true or false"
    parse: Callable[[str], Any]  # raises ValueError for text that is not of the form
    bounds: Bounds | None = None  # every numeric kind has one
    show: Callable[[Any], str] = str  # a value written as a setting's text
    examples: str = ""  # "such as 64m, 512k or 1g"

    @property
    def form(self) -> str:
        """What a value must look like, its range included: ``an integer from 1 to 254``."""
        text = self.noun if self.bounds is None else f"{self.noun} {self.bounds.describe(self.show)}"
        return f"{text}, {self.examples}" if self.examples else text

    def accepts(self, value: Any) -> bool:
        """True when the parsed ``value`` lies in the range (always for a kind without one)."""
        return self.bounds is None or value in self.bounds


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError
    return lowered == "true"


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
_TIME_UNITS = {
    "": 1.0,
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}


def parse_bytes(text: str) -> int:
    """``64m``, ``4k``, ``1g`` or a plain number of bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def parse_seconds(text: str) -> float:
    """``200ms``, ``3s``, ``2min``, ``1h``, or Spark's ``30 seconds``; a bare number means seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _TIME_UNITS:
        raise ValueError(f"{text!r} is not a duration such as 200ms, 10s, 2min or 30 seconds")
    return float(match.group(1)) * _TIME_UNITS[match.group(2).lower()]


def _size_text(size: int) -> str:
    """``size`` bytes as a setting's text: ``64m``, ``4g``, else the plain number."""
    for unit in ("g", "m", "k"):
        if size and size % _SIZE_UNITS[unit] == 0:
            return f"{size // _SIZE_UNITS[unit]}{unit}"
    return str(size)


def _duration_text(seconds: float) -> str:
    """``seconds`` as a setting's text: ``1000h``, ``5min``, ``10s``, ``0s``, else in ms (``0.001ms``)."""
    if seconds == 0:
        return "0s"
    for unit in ("h", "min", "s"):
        if seconds >= _TIME_UNITS[unit] and (seconds / _TIME_UNITS[unit]).is_integer():
            return f"{seconds / _TIME_UNITS[unit]:.0f}{unit}"
    return f"{seconds * 1000:g}ms"


def _choice(*options: str, to: Callable[[str], Any] = str) -> Kind:
    """One of ``options``, as ``to`` makes it of the text."""

    def parse(text: str) -> Any:
        if text.strip() not in options:
            raise ValueError
        return to(text.strip())

    return Kind("one of " + ", ".join(options), parse)


def _int(low: int, high: int | None = None) -> Kind:
    """An integer from ``low`` (to ``high``)."""
    return Kind("an integer", int, Bounds(low, high))


def _size(low: int, high: int | None = None, *, high_open: bool = False, examples: str = "64m, 512k or 1g") -> Kind:
    """A number of bytes from ``low`` (to ``high``)."""
    return Kind("a size", parse_bytes, Bounds(low, high, high_open=high_open), _size_text, f"such as {examples}")


def _duration(low: float, *, low_open: bool = False, examples: str = "200ms, 10s or 2min") -> Kind:
    """A number of seconds from ``low`` (excluded when ``low_open``) to :data:`MAX_WAIT_S`."""
    return Kind(
        "a duration", parse_seconds, Bounds(low, MAX_WAIT_S, low_open=low_open), _duration_text, f"such as {examples}"
    )


BOOL = Kind("true or false", _bool)
PREFETCH_MODES = ("true", "false", "auto")


def _prefetch_mode(text: str) -> str:
    lowered = text.strip().lower()
    if lowered not in PREFETCH_MODES:
        raise ValueError
    return lowered


PREFETCH_MODE = Kind("true, false or auto", _prefetch_mode)
FRACTION = Kind("a number", float, Bounds(0.0, 1.0), lambda value: f"{value:g}")
TEXT = Kind("any text", str.strip)


def _processes(text: str) -> int | None:
    """None for ``auto``, else a count from 1."""
    lowered = text.strip().lower()
    if lowered == "auto":
        return None
    if int(lowered) < 1:
        raise ValueError
    return int(lowered)


PROCESSES = Kind("auto or an integer >= 1", _processes, show=lambda n: "auto" if n is None else str(n))


def setting(key: str, default: str, kind: Kind, doc: str) -> Any:
    """Declare one ``spark.misa.*`` setting as a dataclass field."""
    return field(default=kind.parse(default), metadata={"key": key, "default": default, "kind": kind, "doc": doc})


@dataclass(frozen=True)
class MisaConfig:
    """Every MiSA setting, typed. Build with :meth:`from_session`, :meth:`from_mapping`, :meth:`from_spark_conf` or
    :meth:`from_file`."""

    state_dir: str = setting(
        "spark.misa.state.dir",
        "",
        TEXT,
        "Local directory for the working RocksDB shards and local checkpoints (jobs: --state-dir).",
    )
    state_shards: int = setting(
        "spark.misa.state.shards",
        "4",
        _int(1),
        "Number of RocksDB instances the state is split into (flush, checkpoint, upload run per shard).",
    )
    state_processes: int | None = setting(
        "spark.misa.state.processes",
        "auto",
        PROCESSES,
        "Worker processes of the state phase, each owning a key partition of the state (its RocksDB shards, "
        "cache and commit); 1 keeps the state in the driver's process. auto: the number the state was written "
        "with, or for a new state the driver's cores less one (at least 1, at most spark.misa.state.shards). "
        "Fixed per state: another number needs new state locations.",
    )
    state_placement: str = setting(
        "spark.misa.state.placement",
        "driver",
        _choice("driver", "executors"),
        "Where the state's key partitions live. driver: in the driver's worker processes (deltas are collected to "
        "the driver). executors: in long-lived state hosts on Spark's executors, one task slot each, run as a "
        "background barrier job; deltas go from Spark's tasks to their host as Arrow Flight streams. With "
        "executors, spark.misa.state.processes is the number of hosts (auto: one per executor).",
    )
    state_liveness_timeout_s: float = setting(
        "spark.misa.state.livenessTimeout",
        "30s",
        _duration(0, low_open=True, examples="10s, 30s or 2min"),
        "A state host (placement executors) or state worker process that does not answer a liveness check this "
        "long (hung, stopped, or its executor gone) fails the batch, naming it.",
    )
    state_host_start_s: float = setting(
        "spark.misa.state.hostStartTimeout",
        "3min",
        _duration(0, low_open=True, examples="1min, 3min or 10min"),
        "With placement executors: how long the start waits for the cluster to offer the hosts' task slots and for "
        "every host to start and report its address.",
    )
    state_retain_versions: int = setting(
        "spark.misa.state.retainVersions",
        "10",
        _int(2),
        "Committed versions kept on local disk and on the DFS; older ones are garbage-collected "
        "(at least 2: recovery may roll back one version).",
    )
    state_write_chunk: int = setting(
        "spark.misa.state.writeChunkSize",
        "5000",
        _int(1),
        "Operations per RocksDB WriteBatch (rocksdict holds the GIL while it writes one).",
    )
    commit_mode: CommitMode = setting(
        "spark.misa.commit.mode",
        CommitMode.MISA,
        _choice(*CommitMode, to=CommitMode),
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
        _duration(0, low_open=True, examples="30s, 5min or 1h"),
        "A commit or upload thread silent this long (no file step) is presumed dead and its work is redone.",
    )
    commit_max_restarts: int = setting(
        "spark.misa.commit.maxRestarts",
        "3",
        _int(0),
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
        "spark.misa.checkpoint.uploadThreads", "4", _int(1), "Files uploaded or downloaded in parallel."
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
        _int(1),
        "Attempts per DFS operation before the commit fails with DfsUnavailableError.",
    )
    retry_initial_backoff_s: float = setting(
        "spark.misa.checkpoint.retry.initialBackoff",
        "200ms",
        _duration(0),
        "First wait between DFS attempts; doubles each attempt.",
    )
    retry_max_backoff_s: float = setting(
        "spark.misa.checkpoint.retry.maxBackoff",
        "10s",
        _duration(0),
        "Longest wait between two DFS attempts (at least the initial backoff).",
    )
    retry_jitter_s: float = setting(
        "spark.misa.checkpoint.retry.jitter",
        "200ms",
        _duration(0),
        "Random extra wait added to each backoff, up to this much.",
    )
    rocksdb_write_buffer_bytes: int = setting(
        "spark.misa.rocksdb.writeBufferSize",
        "64m",
        _size(64 << 10, 64 << 30),
        "Memtable size per shard before RocksDB flushes it to an L0 file (RocksDB would clip it to 64k..64g).",
    )
    rocksdb_max_write_buffers: int = setting(
        "spark.misa.rocksdb.maxWriteBufferNumber",
        "3",
        _int(2, C_INT_MAX),
        "Memtables per shard (one active, the rest flushing).",
    )
    rocksdb_l0_compaction_trigger: int = setting(
        "spark.misa.rocksdb.level0FileNumCompactionTrigger",
        "4",
        _int(1, C_INT_MAX),
        "Number of L0 files that starts a compaction.",
    )
    rocksdb_compression: str = setting(
        "spark.misa.rocksdb.compression",
        "lz4",
        _choice("none", "snappy", "lz4", "zstd", "zlib"),
        "Block compression of SST files.",
    )
    rocksdb_block_cache_bytes: int = setting(
        "spark.misa.rocksdb.blockCacheSize", "64m", _size(0), "Block cache shared by all shards (0: none)."
    )
    rocksdb_block_bytes: int = setting(
        "spark.misa.rocksdb.blockSize",
        "4k",
        _size(1, 4 << 30, high_open=True, examples="4k, 16k or 64k"),
        "Data block size of SST files (RocksDB refuses 4g and more).",
    )
    rocksdb_bloom_bits: int = setting(
        "spark.misa.rocksdb.bloomFilterBitsPerKey",
        "10",
        _int(0, 100),
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
        _int(1, C_INT_MAX),
        "Background flush and compaction threads per shard.",
    )
    cache_policy: str = setting(
        "spark.misa.cache.policy",
        "auto",
        _choice("auto", "tac", "lru", "clock", "none"),
        "State cache: tac (timestamp-aware: smallest event time first), lru or clock keep read entries across "
        "batches; none keeps only the batch's writes (reads go to RocksDB); auto is tac while prefetching is on, "
        "else none.",
    )
    cache_max_bytes: int = setting(
        "spark.misa.cache.maxBytes",
        "16m",
        _size(1),
        "Read cache capacity (with a tac, lru or clock cache; the batch's writes are kept apart, never evicted). "
        "Size it to a few batches' keys: more costs Python bookkeeping and memory that RocksDB's block cache "
        "serves faster.",
    )
    memory_tier_max_bytes: int = setting(
        "spark.misa.state.memoryTier.maxBytes",
        "1g",
        _size(0),
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
        _int(1),
        "Threads fetching hinted keys from RocksDB (one multi-get per shard and chunk).",
    )
    prefetch_chunk_keys: int = setting(
        "spark.misa.prefetch.chunkKeys", "2048", _int(1), "Hinted keys per prefetch multi-get."
    )
    prefetch_sketch_depth: int = setting(
        "spark.misa.prefetch.sketch.depth",
        "4",
        _int(1),
        "Rows of the Count-Min sketch that finds hot keys (hot keys are cached anyway and not hinted).",
    )
    prefetch_sketch_width: int = setting(
        "spark.misa.prefetch.sketch.width",
        "65536",
        _int(16, 1 << 32),
        "Counters per row of the Count-Min sketch, rounded up to a power of two (a row is indexed by a 32-bit hash).",
    )
    prefetch_hot_threshold: int = setting(
        "spark.misa.prefetch.sketch.hotThreshold",
        "64",
        _int(1, 254),
        "A key is hot when all its sketch counters exceed this (counters saturate at 255).",
    )
    prefetch_aging_records: int = setting(
        "spark.misa.prefetch.sketch.agingRecords",
        "100000",
        _int(1),
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
        _size(0),
        "With prefetching auto: what a batch's state reads must fetch from a device (Linux's /proc/self/io) "
        "before prefetching is tried; reads served from memory are CPU work that hints cannot hide.",
    )
    prefetch_auto_patience: int = setting(
        "spark.misa.prefetch.auto.patience",
        "3",
        _int(1, 1000),
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
        _int(0, 65535),
        "Port of the driver's Prometheus endpoint (/metrics, on every interface) with the runtime's per-batch "
        "metrics; 0: no endpoint. Needs the prometheus extra: pip install 'misa-pyspark[prometheus]'.",
    )

    python_switch_interval_s: float = setting(
        "spark.misa.python.switchInterval",
        "0.2ms",
        _duration(1e-6, examples="0.2ms, 5ms or 1s"),
        "The driver's Python thread switch interval while a spark-submit job of jobs/ runs (Python's default is "
        "5ms; set by the entry point, not the library): how long a prefetch or commit thread whose I/O returned "
        "may wait for the GIL behind the batch's own Python work (Python counts it in whole microseconds).",
    )
    collect_max_items: int = setting(
        "spark.misa.aggregate.collectMaxItems",
        "10000",
        _int(1, C_INT_MAX),
        "collect_list / collect_set: the most items one group's list may hold; a batch that would grow a list "
        "past it fails naming the aggregate (nothing is dropped): raise it, or bound the group (a window).",
    )

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if not spec.metadata["kind"].accepts(value):
                raise _out_of_range(spec, spec.metadata["kind"].show(value))
        self._check_combinations()

    def _check_combinations(self) -> None:
        """Settings valid alone but not together."""
        if self.retry_max_backoff_s < self.retry_initial_backoff_s:
            raise ConfigError(
                f"spark.misa.checkpoint.retry.maxBackoff={_duration_text(self.retry_max_backoff_s)!r} is below "
                f"spark.misa.checkpoint.retry.initialBackoff={_duration_text(self.retry_initial_backoff_s)!r}: "
                "the longest wait between two DFS attempts must be at least the first"
            )
        if self.prefetch_mode == "true" and self.cache_policy == "none":
            raise ConfigError(
                "spark.misa.prefetch.enabled=true needs a state cache to prefetch into, but "
                "spark.misa.cache.policy is none: set the policy to auto, tac, lru or clock, or "
                "spark.misa.prefetch.enabled=false (or auto, which stays off without a cache)"
            )

    @property
    def prefetching(self) -> str:
        """What prefetching does: ``true``, ``false`` or ``auto``; ``auto`` without a state cache
        (spark.misa.cache.policy=none, nothing to prefetch into) is ``false``."""
        return "false" if self.prefetch_mode == "auto" and self.cache_policy == "none" else self.prefetch_mode

    def cache_policy_for(self, prefetching: bool) -> str:
        """The cache policy while prefetching is on or off: an explicit policy always; ``auto``: tac with
        prefetching, none (only the batch's write buffer) without."""
        if self.cache_policy != "auto":
            return self.cache_policy
        return "tac" if prefetching else "none"

    @property
    def effective_cache_policy(self) -> str:
        """The cache policy at start: with prefetching ``auto``, which starts off, that of prefetching off."""
        return self.cache_policy_for(self.prefetch_mode == "true")

    # ------------------------------------------------------------------ building
    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> MisaConfig:
        """Build from ``{key: text}``; keys outside ``spark.misa.`` are ignored."""
        by_key = {f.metadata["key"]: f for f in dataclasses.fields(cls)}
        parsed: dict[str, Any] = {}
        for key, raw in values.items():
            if not key.startswith(PREFIX):
                continue
            if key not in by_key:
                close = difflib.get_close_matches(key, by_key, n=1)
                hint = f"; did you mean {close[0]}?" if close else "; known keys are listed in conf/misa-defaults.conf"
                raise ConfigError(f"unknown configuration key {key}{hint}")
            parsed[by_key[key].name] = _parse_setting(by_key[key], str(raw))
        return cls(**parsed)

    @classmethod
    def from_spark_conf(cls, conf: Any) -> MisaConfig:
        """Build from a ``pyspark.SparkConf`` (or anything with ``getAll()``)."""
        return cls.from_mapping(dict(conf.getAll()))

    @classmethod
    def from_session(cls, spark: Any = None) -> MisaConfig:
        """Build from a SparkSession (default: the active one): its launch conf (``--conf``, spark-defaults.conf,
        the builder's ``.config``), overridden by ``spark.conf.set`` in the session; the defaults without a session.
        What every entry point given no ``config=`` uses."""
        if spark is None:
            from pyspark.sql import SparkSession  # here: importing misa.config stays light

            spark = SparkSession.getActiveSession()
            if spark is None:
                return cls()
        values = dict(spark.sparkContext.getConf().getAll())
        values.update({k: v for k, v in spark.conf.getAll.items() if k.startswith(PREFIX)})
        return cls.from_mapping(values)

    @classmethod
    def from_file(cls, path: str | Path) -> MisaConfig:
        """Build from a Spark properties file (``key value`` or ``key=value`` lines, ``#`` comments)."""
        return cls.from_mapping(read_properties(Path(path).read_text()))

    def with_values(self, **values: Any) -> MisaConfig:
        """A copy with some typed fields replaced (for command-line overrides)."""
        return dataclasses.replace(self, **values)

    def retry_policy(self) -> RetryPolicy:
        """The DFS retry policy these settings describe."""
        return RetryPolicy(
            self.retry_max_attempts, self.retry_initial_backoff_s, self.retry_max_backoff_s, self.retry_jitter_s
        )


def _parse_setting(spec: dataclasses.Field, text: str) -> Any:
    """The typed value of one setting's ``text``; a ConfigError naming the key, the text and the form when
    it is malformed or out of range."""
    kind: Kind = spec.metadata["kind"]
    try:
        value = kind.parse(text)
    except ValueError:
        raise ConfigError(f"{spec.metadata['key']}={text!r} is malformed: expected {kind.form}") from None
    if not kind.accepts(value):
        raise _out_of_range(spec, text)
    return value


def _out_of_range(spec: dataclasses.Field, shown: str) -> ConfigError:
    """The error for a setting whose value (written as ``shown``) lies outside its range."""
    return ConfigError(f"{spec.metadata['key']}={shown!r} is out of range: expected {spec.metadata['kind'].form}")


def read_properties(text: str) -> dict[str, str]:
    """Parse the Spark properties format."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"([^\s=:]+)\s*[\s=:]\s*(.*)$", line)
        values[match.group(1) if match else line] = match.group(2).strip() if match else ""
    return values


def settings() -> Iterable[tuple[str, str, str, str]]:
    """(key, default text, expected form, doc) of every setting, in declaration order."""
    for f in dataclasses.fields(MisaConfig):
        yield f.metadata["key"], f.metadata["default"], f.metadata["kind"].form, f.metadata["doc"]


def defaults_file_text() -> str:
    """The text of ``conf/misa-defaults.conf``: every key, its default and a one-line comment."""
    lines = [
        "# MiSA for PySpark: every spark.misa.* key with its default.",
        "# Use with: spark-submit --properties-file conf/misa-defaults.conf ... (or --conf key=value).",
        "# Generated by `misa conf`; tests check that it matches the code.",
        "",
    ]
    for key, default, form, doc in settings():
        lines += [f"# {doc} ({form})", f"{key} {default}".rstrip(), ""]
    return "\n".join(lines)
