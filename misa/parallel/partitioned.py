"""The driver's side of a partitioned state: the store, view, commit controller and operator faces the job uses,
each answered by every worker process (:class:`misa.parallel.pool.WorkerPool`).

A version counts as the workers' agreement: it is durable (ack 2) or locally committed (ack 1) only when every
partition has it, so recovery (:func:`misa.runtime.recovery.reconcile`, unchanged) finds the newest version every
partition holds and loads that one in all of them; a batch waits for ack 2 of the previous version in every
partition. Spark's log is mirrored (``mirrorSparkLog``) while the batch applies and before any partition is handed
the batch's version, so no partition's DFS marker runs ahead of the mirrored log.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from misa.config import MisaConfig
from misa.config_keys import CommitMode
from misa.obs.records import CommitRecord, CommitStatus
from misa.operators.base import KeyPartitioned, OperatorResult
from misa.parallel.layout import partition_locations, record_partitions, recorded_partitions
from misa.parallel.pool import StatePool, WorkerPool, worker_copy
from misa.parallel.worker import PartResult
from misa.runtime.hint_target import BatchHintLog, HintCounts
from misa.runtime.spark_mirror import SparkLogMirror
from misa.state.store import EMPTY_VERSION
from misa.state.view import StateReads
from prefetch.manager import PrefetchStats


@dataclass(frozen=True)
class RoutedDeltas:
    """A batch's deltas already at their partitions: each partition's reference to its part, and the rows."""

    parts: list[Any]
    num_rows: int


class _Dfs:
    """Where the partitions' DFS copies are, as messages show it."""

    def __init__(self, shown: str):
        self.shown = shown


class PartitionedCheckpoints:
    """The versions every partition holds (the checkpoint store face recovery uses)."""

    def __init__(self, pool: StatePool, dfs_shown: str):
        self.pool = pool
        self.dfs = _Dfs(dfs_shown)

    def _each(self, method: str, *args: Any) -> list[Any]:
        return self.pool.ask("call", "checkpoints", method, *args)

    def newest_durable(self) -> int | None:
        """The newest version durable in every partition."""
        durable = self._each("newest_durable")
        return None if None in durable else min(durable)

    def locally_committed_after(self, version: int) -> list[int]:
        """Versions after ``version`` and after the newest durable one that every partition holds, durable or
        locally committed."""
        durable = self.newest_durable()
        floor = max(version, EMPTY_VERSION if durable is None else durable)
        held = [set(v) for v in self.pool.ask("versions_after", floor)]
        return sorted(set.intersection(*held))

    def retained_versions(self) -> list[int]:
        """Versions durable in every partition."""
        return sorted(set.intersection(*(set(v) for v in self._each("retained_versions"))))

    def upload_and_retain(self, version: int) -> None:
        """Upload ``version`` in each partition that holds it only locally."""
        self.pool.ask("upload_local", version)

    def start_repair(self) -> None:
        self._each("start_repair")

    def forget_after(self, version: int) -> None:
        self._each("forget_after", version)

    def check_owner(self) -> None:
        self._each("check_owner")

    def forget_local_only(self) -> None:
        self._each("forget_local_only")


class PartitionedStore:
    """The store face: every partition's state, loaded at one version."""

    def __init__(
        self,
        config: MisaConfig,
        operator: KeyPartitioned,
        state_dir: str | Path,
        dfs_url: str,
        count: int,
        pool: StatePool | None = None,
    ):
        self.root = Path(state_dir)
        self.dfs_url = dfs_url
        self.partitions = count
        self._operator = operator
        if pool is None:
            pool = WorkerPool(config, partition_locations(state_dir, dfs_url, count), worker_copy(operator))
        self.pool = pool
        self.checkpoints = PartitionedCheckpoints(self.pool, f"{dfs_url} (partition-0..{count - 1})")
        self.version = EMPTY_VERSION
        self.metadata: dict[str, Any] = {}
        self.operator: dict[str, Any] | None = None  # the operator's signature, set by the job
        self.loaded_operator: dict[str, Any] | None = None

    @property
    def locations(self) -> str:
        return f"local {self.root} and DFS {self.dfs_url}, {self.partitions} partitions (partition-i below each)"

    def claim(self, query_id: str) -> None:
        """Record the partition count (a new state), then claim every partition for ``query_id``; the workers get
        the driver's resolved operator."""
        if recorded_partitions(self.root, self.dfs_url) is None:
            record_partitions(self.dfs_url, self.partitions)
        self.pool.ask("claim", query_id, worker_copy(self._operator), self.operator)

    def load(self, version: int) -> None:
        """Load ``version`` in every partition (the operator metadata is partition 0's: the watermark is the same
        in all); a partition that holds newer versions (it ran ahead of another before a crash) forgets them,
        markers first, so that the batches replayed after ``version`` never overwrite a version that counts."""
        self.metadata, self.loaded_operator = self.pool.ask("load", version)[0]
        self.version = version
        if any(self.pool.ask("versions_after", version)):
            self.checkpoints.forget_after(version)

    def restore_problems(self, version: int) -> list[str]:
        if version == EMPTY_VERSION:
            return []
        problems = self.pool.ask("call", "store", "restore_problems", version)
        return [f"partition {i}: {p}" for i, each in enumerate(problems) for p in each]

    def approximate_keys(self) -> int:
        return sum(self.pool.ask("call", "store", "approximate_keys"))

    def approximate_bytes(self) -> int:
        return sum(self.pool.ask("call", "store", "approximate_bytes"))

    def sst_bytes(self) -> int:
        return sum(self.pool.ask("call", "store", "sst_bytes"))

    def close(self) -> None:
        """Close every worker (raising a commit failure none of the batches saw)."""
        self.pool.close()


class PartitionedView:
    """The view face: reads and cache counters of the last state phase, summed over partitions; whether the workers
    read through their prefetchers (``prefetcher`` is not None then)."""

    def __init__(self, pool: StatePool):
        self.pool = pool
        self.reads = StateReads()
        self.prefetcher: PartitionedView | None = None
        self._can_prefetch = False

    def enable_prefetch(self, *, active: bool) -> None:
        """The workers have prefetch managers (they read through them from the start when ``active``)."""
        self._can_prefetch = True
        self.prefetcher = self if active else None

    def take_reads(self) -> StateReads:
        reads, self.reads = self.reads, StateReads()
        return reads

    def add_reads(self, seconds: float, device_bytes: int | None) -> None:
        """A state phase's reads in the workers: the slowest worker's time, every worker's device bytes."""
        before = self.reads.device_bytes
        total = None if before is None or device_bytes is None else before + device_bytes
        self.reads = StateReads(self.reads.seconds + seconds, total)

    def take_cache_stats(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for stats in self.pool.ask("call", "view", "take_cache_stats"):
            for name, value in stats.items():
                totals[name] = totals.get(name, 0) + value
        return totals

    def freeze(self, version: int) -> int:
        """The batch's version, frozen in each worker when the controller face hands it over."""
        return version

    def reset(self) -> None:
        """Nothing here: each worker resets its view when the controller face adopts a loaded version."""

    def set_prefetching(self, on: bool) -> None:
        """Between batches: every worker reads through its prefetcher, or not."""
        if not self._can_prefetch or on == (self.prefetcher is not None):
            return
        self.pool.ask("set_prefetching", on)
        self.prefetcher = self if on else None

    def close(self) -> None:
        """Nothing: the workers close with the store face."""


class PartitionedCommit:
    """The commit controller face: every worker's controller, in the job's mode; Spark's log mirrored by the driver
    while each batch applies, before the batch's version is handed over."""

    def __init__(self, store: PartitionedStore, mode: str, spark_log: SparkLogMirror | None):
        self.store = store
        self.pool = store.pool
        self.mode = CommitMode(mode)
        self.spark_log = spark_log
        self._mirroring = self._mirror_thread()
        self._mirrored: Future | None = None

    def _mirror_thread(self) -> ThreadPoolExecutor | None:
        return ThreadPoolExecutor(1, thread_name_prefix="misa-mirror") if self.spark_log else None

    def renewed(self) -> PartitionedCommit:
        """For a restart, after :meth:`close`: new workers (the old ones' pending commits are dropped), to be claimed
        and recovered, and a new mirror thread (this object stays the job's)."""
        self.pool.restart()
        self._mirroring, self._mirrored = self._mirror_thread(), None
        return self

    def start_mirror(self) -> None:
        """Start mirroring Spark's log (the batch is running, so Spark's entries up to it are written)."""
        if self._mirroring is not None and self.spark_log is not None and self._mirrored is None:
            self._mirrored = self._mirroring.submit(self.spark_log.sync, self.store.checkpoints.check_owner)

    def mirror_spark_log(self) -> None:
        """Mirror Spark's log now, in the background (Spark reported a batch)."""
        if self._mirrored is None or self._mirrored.done():
            self._mirrored = None
            self.start_mirror()

    def commit(self, version: int, metadata: dict[str, Any]) -> None:
        """Hand ``version`` to every partition (each commits its own operator's metadata) once Spark's log is
        mirrored."""
        if self._mirrored is not None:
            mirrored, self._mirrored = self._mirrored, None
            mirrored.result()
        self.pool.ask("commit", version)

    def wait_durable(self, version: int) -> float:
        """Block until every partition has ack 2 of ``version``; the longest wait."""
        return max(self.pool.ask("call", "controller", "wait_durable", version))

    def drain(self) -> None:
        self.pool.ask("call", "controller", "drain")

    def loaded(self, version: int) -> None:
        """Every worker continues from the loaded ``version``: operator restored, view reset, nothing pending."""
        self.pool.ask("adopt", version)

    def status(self) -> CommitStatus:
        """Versions pending in any partition; the newest versions with ack 1 and ack 2 in every partition."""
        each: list[CommitStatus] = self.pool.ask("call", "controller", "status")
        local = [s.last_local for s in each]
        durable = [s.last_durable for s in each]
        return CommitStatus(
            tuple(sorted({v for s in each for v in s.pending})),
            None if None in local else min(local),  # type: ignore[type-var]
            None if None in durable else min(durable),  # type: ignore[type-var]
        )

    def finished(self) -> list[CommitRecord]:
        """Records of versions that became durable, one per version over its partitions (times: the slowest;
        counts and bytes: the sum)."""
        by_version: dict[int, list[CommitRecord]] = {}
        for records in self.pool.ask("call", "controller", "finished"):
            for record in records:
                by_version.setdefault(record.version, []).append(record)
        return [merged(by_version[v]) for v in sorted(by_version)]

    def close(self) -> None:
        """Stop mirroring (the workers' controllers close with the store face)."""
        if self._mirroring is not None:
            self._mirroring.shutdown(wait=True)


class PartitionedHints:
    """Hint rows to the workers (:class:`misa.runtime.hint_target.HintTarget`): each row to the partition whose state
    it names, where the worker's copy of the operator names the keys and its prefetch manager fetches them."""

    def __init__(self, operator: KeyPartitioned, pool: StatePool):
        self.operator = operator
        self.pool = pool

    def hint_rows(self, hints: pa.Table, latest_event_us: int | None, hinted: BatchHintLog) -> HintCounts:
        parts, _ = self.pool.route(hints, self.operator.hint_key_reader())
        try:
            counts: list[HintCounts] = self.pool.ask_each("hint", [(p, latest_event_us) for p in parts])
        except BaseException:
            self.pool.discard(parts)
            raise
        total = sum(counts, HintCounts())
        hinted.rows += total.hinted
        return total

    def take_stats(self) -> PrefetchStats:
        """The batch's prefetch counters of every worker: counts summed, the smallest slack."""
        total = PrefetchStats()
        for stats in self.pool.ask("prefetch_stats"):
            for spec in dataclasses.fields(PrefetchStats):
                mine, theirs = getattr(total, spec.name), getattr(stats, spec.name)
                if spec.name == "slack_s_min":
                    both = [v for v in (mine, theirs) if v is not None]
                    setattr(total, spec.name, min(both) if both else None)
                else:
                    setattr(total, spec.name, mine + theirs)
        return total


def merged(records: list[CommitRecord]) -> CommitRecord:
    """One version's records of several partitions as one: durations the longest, counts the sum."""
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(CommitRecord):
        each = [getattr(r, spec.name) for r in records]
        values[spec.name] = each[0] if spec.name == "version" else max(each) if spec.type == "float" else sum(each)
    return CommitRecord(**values)


class PartitionedOperator:
    """The state-phase face of the operator: a batch's deltas routed by key partition to the workers, each running
    its copy of the operator; their outputs gathered. Workers' watermarks observe the whole batch's latest event."""

    def __init__(
        self, operator: KeyPartitioned, store: PartitionedStore, commit: PartitionedCommit, view: PartitionedView
    ):
        self.operator = operator
        self.pool = store.pool
        self.commit = commit
        self.view = view

    def send(self, deltas: pa.Table | DataFrame) -> RoutedDeltas:
        """Route ``deltas`` to the partitions (a DataFrame's rows from Spark's tasks, when the pool can)."""
        parts, rows = self.pool.route(deltas, self.operator.partition_key_reader())
        return RoutedDeltas(parts, rows)

    def apply(self, deltas: pa.Table | RoutedDeltas, state: Any) -> OperatorResult:
        """Route (unless :meth:`send` did), apply in every partition, then give every watermark the batch's latest
        event."""
        self.commit.start_mirror()
        routed = deltas if isinstance(deltas, RoutedDeltas) else self.send(deltas)
        try:
            parts: list[PartResult] = self.pool.ask_each("apply", [(p,) for p in routed.parts])
        except BaseException:
            self.pool.discard(routed.parts)
            raise
        if self.operator.event_watermark() is not None:
            self.pool.ask("observe", [p.max_event_us for p in parts])
        return self._gathered(parts, data=True)

    def no_data_batch(self, state: Any) -> OperatorResult:
        """Spark's batch without data, in every partition."""
        return self._gathered(self.pool.ask("no_data_batch"), data=False)

    def follow_watermark(self, spark_us: int) -> None:
        """Every worker's watermark for the coming batch is Spark's."""
        self.pool.ask("follow_watermark", spark_us)

    def watermark_moves(self) -> bool:
        """Whether the workers' watermark (every worker's is the whole batch's) moves at the next batch."""
        return any(self.pool.ask("watermark_moves"))

    def _gathered(self, parts: list[PartResult], data: bool) -> OperatorResult:
        output = self.pool.gather([p.output for p in parts])
        devices = [p.device_read_bytes for p in parts]
        self.view.add_reads(max(p.read_s for p in parts), None if None in devices else sum(devices))  # type: ignore[arg-type]
        return OperatorResult(
            output,
            late_rows=sum(p.late_rows for p in parts) if data else 0,
            state_reads=sum(p.state_reads for p in parts),
            dropped_rows=sum(p.dropped_rows for p in parts) if data else 0,
            closed_windows=sum(p.closed_windows for p in parts),
        )
