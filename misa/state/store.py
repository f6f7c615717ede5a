"""The sharded RocksDB state store: N rocksdict DBs, versioned by checkpoints."""

from __future__ import annotations

import heapq
import itertools
import shutil
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import rocksdict

from checkpoint import CheckpointStore, Fence, LocalCommit, Restored, no_fence
from checkpoint.exceptions import OwnershipError
from checkpoint.owner import Owner, OwnerRecord, StateDirLock
from common import failpoints
from common.location import parse
from misa.config import MisaConfig
from misa.exceptions import ConfigError
from misa.state.rocksdb_options import shard_options, unlogged_writes

EMPTY_VERSION = -1  # the version before Spark batch 0: no state
OWNER_KEY = "misa.owner"  # the query and driver epoch that wrote a version, in its manifests' metadata
OPERATOR_KEY = "misa.operator"  # the signature of the operator that wrote a version (misa.runtime.compat)


def shard_of(key: bytes, shards: int) -> int:
    """The shard that owns ``key`` (stable across processes)."""
    return zlib.crc32(key) % shards


def shards_of(keys: Sequence[bytes], shards: int) -> np.ndarray:
    """:func:`shard_of` of each of ``keys``, as one array (crc32 mapped in C, no Python call per key)."""
    return np.fromiter(map(zlib.crc32, keys), np.int64, len(keys)) % shards


class StateStore:
    """Keyed byte state over ``config.state_shards`` RocksDB shards.

    ``version`` is the Spark batch id the state reflects (``EMPTY_VERSION`` before the first).
    """

    def __init__(self, config: MisaConfig, state_dir: str | Path | None = None, dfs_url: str | None = None):
        state_dir = state_dir or config.state_dir
        dfs_url = dfs_url or config.dfs_url
        if not state_dir:
            raise ConfigError("spark.misa.state.dir is not set: give a local directory for the state")
        if not dfs_url:
            raise ConfigError("spark.misa.checkpoint.dfsUrl is not set: give an fsspec URL such as file:///data/ckpt")
        self.root = Path(state_dir)
        _refuse_nested(self.root, dfs_url)
        self._lock = StateDirLock(self.root).acquire()  # before anything in the state dir changes
        self.shards = config.state_shards
        self.checkpoints = CheckpointStore(
            self.root,
            dfs_url,
            self.shards,
            config.retry_policy(),
            config.upload_threads,
            config.verify_reads,
            config.state_retain_versions,
        )
        self._cache = rocksdict.Cache(config.rocksdb_block_cache_bytes)
        self._options = shard_options(config, self._cache)
        self._write_options = unlogged_writes()
        self._write_chunk = config.state_write_chunk
        self._wait_for_compaction = config.commit_wait_for_compaction
        self._pool = ThreadPoolExecutor(self.shards, thread_name_prefix="misa-shard")
        self._dbs: list[rocksdict.Rdict] = []
        self.version = EMPTY_VERSION
        self.metadata: dict[str, Any] = {}  # the operator metadata stored with the loaded version
        self.owner: Owner | None = None  # set by claim(); recorded in every version written after it
        self.operator: dict[str, Any] | None = None  # the operator's signature, set by the job; recorded likewise
        self.loaded_operator: dict[str, Any] | None = None  # the signature recorded with the loaded version
        self.load(EMPTY_VERSION)

    # ------------------------------------------------------------------ ownership
    def claim(self, query_id: str) -> Owner:
        """Make this driver the owner of the state for ``query_id`` (Spark's query id): the state dir and
        the DFS location must not belong to another query, and the DFS epoch is incremented, which stops
        a driver still running on it at its next marker, upload or GC. Nothing else is changed before."""
        local = OwnerRecord(*parse(self.root).filesystem(), str(self.root), what="state dir")
        local.refuse_foreign(query_id)
        dfs = self.checkpoints.dfs
        record = OwnerRecord(dfs.fs, dfs.root, dfs.shown)
        owner = record.claim(query_id)
        local.claim(query_id)
        dfs.guard = self.checkpoints.local.guard = record.check
        self.owner = owner
        return owner

    def follow(self, query_id: str) -> None:
        """Record the DFS location's owner in the versions written from now on, without claiming it (a standby,
        whose versions its host's claim fences nothing of); another query's location is refused."""
        dfs = self.checkpoints.dfs
        self.owner = OwnerRecord(dfs.fs, dfs.root, dfs.shown).refuse_foreign(query_id)

    # ------------------------------------------------------------------ versions
    def _db_dir(self, shard: int) -> Path:
        return self.root / f"shard-{shard}" / "db"

    def load(self, version: int, prefer_local: bool = True) -> Restored | None:
        """Replace the working state by ``version`` (rollback or roll-forward); EMPTY_VERSION clears it."""
        self._close_dbs()
        dests = [self._db_dir(s) for s in range(self.shards)]
        restored = None
        if version == EMPTY_VERSION:
            for dest in dests:
                shutil.rmtree(dest, ignore_errors=True)
        else:
            restored = self.checkpoints.restore(version, dests, prefer_local)
        self._dbs = [self._open(d) for d in dests]
        self.version = version
        self.metadata = dict(restored.metadata) if restored else {}
        written_by = self.metadata.pop(OWNER_KEY, {}).get("query_id")
        self.loaded_operator = self.metadata.pop(OPERATOR_KEY, None)
        if self.owner is not None and written_by not in (None, self.owner.query_id):
            raise OwnershipError(
                f"version {version} of the state ({self.locations}) was written by query "
                f"{written_by}, not by this query ({self.owner.query_id}): two queries share these state locations. "
                f"Give this query its own spark.misa.state.dir and spark.misa.checkpoint.dfsUrl."
            )
        return restored

    def _open(self, path: Path) -> rocksdict.Rdict:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = rocksdict.Rdict(str(path), self._options)
        db.set_write_options(self._write_options)
        return db

    # ------------------------------------------------------------------ reads
    def get(self, key: bytes) -> bytes | None:
        return self._dbs[shard_of(key, self.shards)].get(key)

    def get_many(self, keys: Sequence[bytes], parallel: bool = True) -> list[bytes | None]:
        """Values of ``keys`` in order (None when absent); one multi-get per shard, shards in parallel
        on the store's pool (or one after another on this thread when ``parallel`` is false)."""
        shard_of_key = shards_of(keys, self.shards)
        wanted = np.empty(len(keys), dtype=object)
        wanted[:] = keys
        out = np.full(len(keys), None, dtype=object)

        def fetch(shard: int) -> None:
            idx = np.flatnonzero(shard_of_key == shard)
            if len(idx):
                out[idx] = self._dbs[shard].get(wanted[idx].tolist())

        list((self._pool.map if parallel else map)(fetch, range(self.shards)))
        return out.tolist()

    def scan(self, begin: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """All (key, value) with begin <= key < end in key order, merged across shards."""
        return heapq.merge(*(self._shard_items(db, begin, end) for db in self._dbs), key=lambda kv: kv[0])

    def items(self, begin: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """All (key, value) with begin <= key < end, shard after shard (each in key order, not merged)."""
        return itertools.chain.from_iterable(self._shard_items(db, begin, end) for db in self._dbs)

    @staticmethod
    def _shard_items(db: rocksdict.Rdict, begin: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        options = rocksdict.ReadOptions()
        if end is not None:
            options.set_iterate_upper_bound(end)
        yield from db.items(from_key=begin, read_opt=options) if begin is not None else db.items(read_opt=options)

    def count_keys(self) -> int:
        """The number of live keys, counted exactly (one pass over every shard's keys)."""
        return sum(sum(1 for _ in db.keys()) for db in self._dbs)

    # ------------------------------------------------------------------ writes
    def write(self, changes: Iterable[tuple[bytes, bytes | None]], fence: Fence = no_fence) -> int:
        """Apply (key, value) puts and (key, None) deletes in WriteBatches of at most
        ``spark.misa.state.writeChunkSize`` operations (``fence`` before each); returns the number applied."""
        chunk = self._write_chunk
        batches = [rocksdict.WriteBatch(raw_mode=True) for _ in range(self.shards)]
        counts = [0] * self.shards
        total = 0
        for key, value in changes:
            shard = shard_of(key, self.shards)
            if value is None:
                batches[shard].delete(key)
            else:
                batches[shard].put(key, value)
            counts[shard] += 1
            total += 1
            if counts[shard] >= chunk:
                fence()
                self._dbs[shard].write(batches[shard])
                batches[shard], counts[shard] = rocksdict.WriteBatch(raw_mode=True), 0
        for shard, batch in enumerate(batches):
            if counts[shard]:
                fence()
                self._dbs[shard].write(batch)
        return total

    def apply(
        self, changes: dict[bytes, bytes | None], range_deletes: Iterable[tuple[bytes, bytes]], fence: Fence = no_fence
    ) -> None:
        """Apply a batch's range deletes, then write its changes (a put after a range delete survives);
        ``fence`` is called before each range delete and each WriteBatch."""
        for begin, end in range_deletes:
            fence()
            self.delete_range(begin, end)
        self.write(changes.items(), fence)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete every key in [begin, end) on every shard."""
        for db in self._dbs:
            db.delete_range(begin, end)

    def flush(self) -> float:
        """Flush every shard's memtable (in parallel; rocksdict releases the GIL); returns seconds."""
        started = time.monotonic()
        failpoints.hit("ckpt.before_flush")
        list(self._pool.map(lambda db: db.flush(True), self._dbs))
        failpoints.hit("ckpt.after_flush")
        return time.monotonic() - started

    def compact(self) -> None:
        """Compact every shard fully (benchmarks use it to start from a settled state)."""
        list(self._pool.map(lambda db: db.compact_range(None, None), self._dbs))

    def running_compactions(self) -> int:
        return sum(db.property_int_value("rocksdb.num-running-compactions") or 0 for db in self._dbs)

    def approximate_keys(self) -> int:
        return sum(db.property_int_value("rocksdb.estimate-num-keys") or 0 for db in self._dbs)

    def approximate_bytes(self) -> int:
        """The state's size in RocksDB: live SST files plus memtables, over every shard."""
        properties = ("rocksdb.live-sst-files-size", "rocksdb.cur-size-all-mem-tables")
        return sum(db.property_int_value(p) or 0 for db in self._dbs for p in properties)

    def sst_bytes(self) -> int:
        """The state's SST files over every shard (what reads reach once the caches and memtables miss)."""
        return sum(db.property_int_value("rocksdb.total-sst-files-size") or 0 for db in self._dbs)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, version: int, metadata: dict[str, Any] | None = None, fence: Fence = no_fence) -> LocalCommit:
        """Flush, then checkpoint every shard locally as ``version`` and write its local marker (ack 1).
        ``fence`` is called before the flush and before each file step of the checkpoint."""
        fence()
        flush_s = self.flush()
        if self._wait_for_compaction:
            while self.running_compactions():
                fence()
                time.sleep(0.01)
        metadata = dict(metadata or {})
        if self.owner is not None:
            metadata[OWNER_KEY] = {"query_id": self.owner.query_id, "epoch": self.owner.epoch}
        if self.operator is not None:
            metadata[OPERATOR_KEY] = self.operator
        commit = self.checkpoints.checkpoint_local(version, self._dbs, metadata, fence)
        commit.flush_s = flush_s
        commit.seconds += flush_s
        self.version = version
        return commit

    @property
    def locations(self) -> str:
        """Where the state lives, credentials redacted (for messages): its local dir and its DFS location."""
        return f"local {self.root}, DFS {self.checkpoints.dfs.shown}"

    def restore_problems(self, version: int) -> list[str]:
        """Why ``version`` cannot be loaded (empty when it can; the empty version always can)."""
        return [] if version == EMPTY_VERSION else self.checkpoints.problems(version)

    # ------------------------------------------------------------------ lifecycle
    def _close_dbs(self) -> None:
        for db in self._dbs:
            db.close()
        self._dbs = []

    def close(self) -> None:
        """Close every shard; the working state is not checkpointed by closing."""
        self.checkpoints.wait_repair()
        self._close_dbs()
        self._pool.shutdown(wait=True)
        self._lock.release()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refuse_nested(state_dir: Path, dfs_url: str) -> None:
    """A DFS copy inside the state dir (or the reverse) is no second copy: ack 2 would count as ack 1."""
    dfs = parse(dfs_url).local
    if dfs is None:
        return
    state = state_dir.expanduser().resolve()
    if dfs == state or state in dfs.parents or dfs in state.parents:
        raise ConfigError(
            f"spark.misa.checkpoint.dfsUrl ({dfs}) and spark.misa.state.dir ({state}) overlap: the DFS copy must "
            f"be a second copy on other storage, outside the working state dir (and not containing it)"
        )
