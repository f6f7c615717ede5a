"""The typed records behind the per-batch metrics (DESIGN section 8): the batch's phases, its counts, its commits.

They are written as one JSON object per batch (:class:`misa.obs.metrics.BatchMetrics`) and read
back by ``misa report``, whose phase lists come from the fields here, so a phase is named once; so do the
lists of the cache's and the prefetch manager's counters, from their stats classes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from common.cache_contract import CacheStats
from prefetch.manager import PrefetchStats


@dataclass
class CommitRecord:
    """Timings and sizes of one version's commit."""

    version: int
    apply_s: float = 0.0
    flush_s: float = 0.0
    checkpoint_s: float = 0.0
    upload_s: float = 0.0
    bytes_uploaded: int = 0
    bytes_reused: int = 0
    files_uploaded: int = 0
    dfs_requests: int = 0  # calls to the DFS of the upload (listings, files, manifests, marker)
    retention_requests: int = 0  # calls to the DFS of the retention GC after it
    log_files_mirrored: int = 0  # Spark's log files copied to (or removed from) the checkpoint location
    log_requests: int = 0
    log_mirror_s: float = 0.0
    ack1_s: float = 0.0  # from the hand-over to ack 1
    ack2_s: float = 0.0  # from the hand-over to ack 2
    compaction_running: int = 0
    restarts: int = 0


@dataclass
class BatchPhases:
    """Where a batch's time went on the driver, in seconds, in the order the phases run."""

    compute_s: float = 0.0  # Spark: the count or quarantine job and the deltas job
    hint_wait_s: float = 0.0  # waiting for the hint job after the deltas
    state_read_s: float = 0.0  # reading state (cache, commit buffers, RocksDB)
    state_apply_s: float = 0.0  # merging the deltas into the state, without the reads
    sink_s: float = 0.0
    commit_inline_s: float = 0.0  # handing the commit over (and the stages the mode runs inline)
    ack_wait_s: float = 0.0  # waiting for ack 2 of the previous version


@dataclass
class BatchRecord:
    """The runtime's side of one batch; Spark's side (latency, input rows) is joined when Spark reports it."""

    input_rows: int
    deltas: int = 0  # rows the Spark part handed to the driver's state phase
    output_rows: int = 0
    late_rows: int = 0
    dropped_rows: int = 0
    bad_records: int | None = None  # None: the job sets no bad records aside
    state_keys: int = 0  # RocksDB's estimate
    state_bytes: int = 0  # RocksDB's live SST files and memtables, approximate
    sst_bytes: int = 0  # RocksDB's SST files (rocksdb.total-sst-files-size), every shard
    state_reads: int = 0
    state_writes: int | None = None  # keys the batch put into the state (None: not counted, worker processes)
    state_deletes: int | None = None  # keys and key ranges it deleted
    state_device_read_bytes: int | None = None  # read from a device during the state reads (None: not accounted)
    cache: dict[str, int] = field(default_factory=dict)
    prefetch: dict[str, Any] | None = None
    prefetch_auto: dict[str, Any] | None = None  # with prefetching auto: on or off, the next batch's, and why
    phases: BatchPhases = field(default_factory=BatchPhases)
    batch_s: float = 0.0
    without_data: bool = False  # a batch without data Spark's trigger ran: the operator's eviction, no input

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values (``bad_records`` left out when the job has none)."""
        out = dataclasses.asdict(self)
        if self.bad_records is None:
            del out["bad_records"]
        return out


@dataclass(frozen=True)
class CommitStatus:
    """Where the commit of the state stands: versions handed to the commit and not yet durable, the
    newest version with ack 1 (locally committed) and with ack 2 (durable on the DFS); None: none yet
    (or, in mode ``nocommit``, never)."""

    pending: tuple[int, ...] = ()
    last_local: int | None = None
    last_durable: int | None = None

    @property
    def lag(self) -> int:
        """Versions the DFS copy is behind the state: the number of pending versions."""
        return len(self.pending)


@dataclass(frozen=True)
class BatchReport:
    """One batch as the runtime saw it when the batch ended (:meth:`misa.job.StatefulJob.last_batch`)."""

    batch_id: int
    record: BatchRecord
    commits: tuple[CommitRecord, ...] = ()  # commits that became durable during the batch, oldest first
    commit_status: CommitStatus = field(default_factory=CommitStatus)  # at the batch's end


BATCH_PHASES = tuple(f.name for f in dataclasses.fields(BatchPhases))
COMMIT_PHASES = tuple(f.name for f in dataclasses.fields(CommitRecord) if f.name.endswith("_s"))


def counters(stats: type) -> tuple[str, ...]:
    """The integer counters a stats dataclass declares, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(stats) if f.type in (int, "int"))


CACHE_COUNTERS = counters(CacheStats)
PREFETCH_COUNTERS = counters(PrefetchStats)
