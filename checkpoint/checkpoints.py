"""Hierarchical checkpoints: every version on local disk first (ack 1), then on the DFS (ack 2)."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import rocksdict

from common.location import parse

from .dfs import Check, DfsCheckpoints, GcStats, UploadStats
from .exceptions import CorruptCheckpointError, ShardCountError
from .fence import Fence, no_fence
from .local import LocalCheckpoints
from .manifest import ShardManifest
from .retry import RetryPolicy

log = logging.getLogger(__name__)


@dataclass
class LocalCommit:
    """The outcome of a local checkpoint (ack 1)."""

    version: int
    manifests: list[ShardManifest]
    seconds: float
    flush_s: float = 0.0

    @property
    def total_bytes(self) -> int:
        return sum(m.total_bytes for m in self.manifests)


@dataclass(frozen=True)
class Restored:
    """Where a restore found its version, and the operator metadata stored with it."""

    version: int
    source: str  # "local" or "dfs"
    metadata: dict[str, Any]


class CheckpointStore:
    """Local-then-DFS checkpoints of a fixed number of shards."""

    def __init__(
        self,
        local_root: str | Path,
        dfs_url: str,
        shards: int,
        retry: RetryPolicy = RetryPolicy(),
        upload_threads: int = 4,
        verify_reads: bool = False,
        retain: int = 10,
    ):
        self.shards = shards
        self.retain = retain
        self.local = LocalCheckpoints(local_root)
        parse(dfs_url).filesystem()  # no file system for the URL: a LocationError naming the pip extra to install
        self.dfs = DfsCheckpoints(dfs_url, retry, upload_threads, verify_reads)
        self._no_repair = threading.Event()  # cleared while a repair runs: uploads and GC wait for it
        self._no_repair.set()
        self._repair: threading.Thread | None = None

    def checkpoint_local(
        self, version: int, dbs: Sequence[rocksdict.Rdict], metadata: dict[str, Any], fence: Fence = no_fence
    ) -> LocalCommit:
        """RocksDB checkpoints of every (already flushed) shard, manifests, then the local marker;
        ``fence`` is called before each file step."""
        started = time.monotonic()
        manifests = [self.local.create_shard(version, shard, db, metadata, fence) for shard, db in enumerate(dbs)]
        self.local.commit(version, manifests, fence)
        return LocalCommit(version, manifests, time.monotonic() - started)

    def upload(
        self, version: int, fence: Fence = no_fence, before_marker: Callable[[], object] | None = None
    ) -> UploadStats:
        """Copy a locally committed version to the DFS; returns once its DFS marker is written (after
        ``before_marker``, when given, returned). ``fence`` is called before each file step."""
        self._await_repair(fence)
        return self._upload(version, fence, before_marker)

    def start_repair(self) -> None:
        """In the background, check the DFS copy of every committed version that has a valid local copy and
        upload again what is damaged or missing there (each file is read back once by this process, however
        many versions share it); a damaged older version that no local copy can repair (a new machine, new
        state hosts) is forgotten, as recovery can never use it. Uploads and GC wait for it; a failure is
        logged (the next upload checks the files it reuses again)."""
        self._no_repair.clear()
        self._repair = threading.Thread(target=self._run_repair, name="misa-repair", daemon=True)
        self._repair.start()

    def wait_repair(self) -> None:
        """Return once the repair started by :meth:`start_repair` (if any) has ended."""
        if self._repair is not None:
            self._repair.join()

    def _run_repair(self) -> None:
        try:
            local = set(self.local.versions())
            committed = self.dfs.committed_versions()
            unrepairable = []
            for version in committed:
                if version in local and not self.local.problems(version):
                    stats = self._upload(version)
                    if stats.files_repaired:
                        log.warning("re-uploaded %d damaged DFS file(s) of version %d", stats.files_repaired, version)
                elif version != committed[-1]:
                    unrepairable.append(version)
            self._forget_damaged(unrepairable)
        except Exception as exc:  # noqa: BLE001 - logged; the next upload checks the same files again
            log.warning("could not check the DFS copy of the state (the next upload checks it): %s", exc)
        finally:
            self._no_repair.set()

    def _forget_damaged(self, versions: list[int]) -> None:
        """Forget those of ``versions`` (older than the newest, no valid local copy) whose DFS copy is damaged: a
        file missing, of another size or failing its digest, a marker or manifest unreadable. A DFS that cannot
        be reached raises, and nothing is forgotten."""
        for version in versions:
            problems = self.dfs.verify([version], Check.UNVERIFIED)
            if problems:
                log.warning(
                    "version %d of the state at %s is damaged (%s) and no local copy can repair it: it is forgotten "
                    "(recovery could never use it; its files go at the next GC)",
                    version,
                    self.dfs.shown,
                    problems[0].partition(": ")[2],
                )
                self.dfs.guard()
                self.dfs.forget([version])

    def _await_repair(self, fence: Fence) -> None:
        """Wait for a running repair, calling ``fence`` meanwhile (it beats a commit thread's heartbeat)."""
        while not self._no_repair.wait(0.05):
            fence()

    def _upload(
        self, version: int, fence: Fence = no_fence, before_marker: Callable[[], object] | None = None
    ) -> UploadStats:
        manifests = self.local.manifests(version)
        folders = [self.local.checkpoint_dir(m.shard, version) for m in manifests]
        return self.dfs.upload(version, manifests, folders, fence, before_marker)

    def upload_and_retain(self, version: int, fence: Fence = no_fence) -> UploadStats:
        """:meth:`upload`, then :meth:`gc` as a step of its own."""
        stats = self.upload(version, fence)
        self.gc(version, fence)
        return stats

    def check_owner(self) -> None:
        """Raise :class:`checkpoint.exceptions.OwnershipError` when another driver or query claimed the state since."""
        self.dfs.guard()

    def ack1_holds(self, version: int) -> bool:
        """Whether the local checkpoint of ``version`` is complete and valid (its local marker counts)."""
        return not self.local.problems(version)

    def locally_committed_after(self, version: int) -> list[int]:
        """Versions newer than ``version`` whose ack 1 holds (not yet durable: recovery uploads them)."""
        return [v for v in self.local.versions() if v > version and self.ack1_holds(v)]

    def forget_local_only(self) -> None:
        """Forget local versions newer than the newest durable one: they belong to a run whose Spark checkpoint
        is gone (its batches are replayed from the mirrored log)."""
        durable = self.newest_durable()
        for version in [v for v in self.local.versions() if durable is None or v > durable]:
            log.warning("forgetting local version %d: the local copy of Spark's checkpoint was replaced", version)
            self.local.forget(version)

    def gc(self, newest_durable: int, fence: Fence = no_fence) -> GcStats:
        """Retention on both levels; local versions newer than ``newest_durable`` are kept.
        ``fence`` is called before each level and before each DFS delete."""
        self._await_repair(fence)
        stats = self.dfs.gc(self.retain, fence)
        fence()
        self.local.gc(self.retain, keep_from=newest_durable)
        return stats

    def forget_after(self, version: int) -> None:
        """Remove the commit markers of versions newer than ``version`` on both levels (rollback), once a running
        repair has ended (it would write the marker of a version it heals again)."""
        self._await_repair(no_fence)
        for newer in [v for v in self.local.versions() if v > version]:
            self.local.forget(newer)
        self.dfs.forget([v for v in self.dfs.committed_versions() if v > version])

    def problems(self, version: int) -> list[str]:
        """Why ``version`` cannot be restored (empty when it can), by what :meth:`restore` checks: a valid
        local copy (marker, manifests, sizes and digests of its files) is enough; else the DFS copy needs
        a whole marker, manifests that match it and every file present with its size and digest (a file
        this process verified before and whose listing is unchanged since is not read again). Either copy
        must have this store's shard count."""
        if version in self.local.versions():
            local = self.local.problems(version)
            if not local:
                return self._shard_count_problems(version, self.local.read_marker(version).shards)
        else:
            local = [f"version {version} has no local marker"]
        if version not in self.dfs.committed_versions():
            return [f"local: {local[0]}", f"DFS: version {version} has no commit marker"]
        try:
            manifests = self.dfs.manifests(version)
        except (OSError, ValueError, CorruptCheckpointError) as exc:
            return [f"local: {local[0]}", f"DFS: {exc}"]
        damaged = self._shard_count_problems(version, len(manifests)) or self.dfs.file_problems(manifests)
        return [f"local: {local[0]}", *(f"DFS: {problem}" for problem in damaged)] if damaged else []

    def newest_durable(self) -> int | None:
        """The newest version with ack 2 (its DFS marker), or None."""
        return self.dfs.newest_durable()

    def restore(self, version: int, dests: Sequence[Path], prefer_local: bool = True) -> Restored:
        """Materialize ``version`` into one empty directory per shard, from a valid local copy when
        there is one, else from the DFS (every file checked against its digest)."""
        if len(dests) != self.shards:
            raise ValueError(f"restore needs {self.shards} shard directories, got {len(dests)}")
        for dest in dests:
            shutil.rmtree(dest, ignore_errors=True)
        local_problem = "not preferred" if not prefer_local else f"version {version} has no local marker"
        if prefer_local and version in self.local.versions():
            self._check_shard_count(version, self.local.read_marker(version).shards)
            problems = self.local.problems(version)
            if not problems:
                manifests = [self.local.restore_shard(version, s, Path(d)) for s, d in enumerate(dests)]
                return Restored(version, "local", manifests[0].metadata)
            local_problem = problems[0]
            log.warning("local copy of version %d is not usable (%s); restoring from the DFS", version, local_problem)
        try:
            if version not in self.dfs.committed_versions():
                raise CorruptCheckpointError(f"version {version} has no commit marker on {self.dfs.shown}")
            manifests = self.dfs.manifests(version)
            self._check_shard_count(version, len(manifests))
            for path, sha in self.dfs.restore(version, manifests, [Path(d) for d in dests]):
                self.local.remember(path, sha)
        except (ValueError, CorruptCheckpointError, FileNotFoundError) as exc:
            if isinstance(exc, ShardCountError):
                raise
            older = [v for v in self.retained_versions() if v < version]
            previous = (
                f"the previous retained version is {older[-1]}: recovery starts from it when "
                f"spark.misa.recovery.allowPreviousVersion is true (Spark then replays the batches after it)"
                if older
                else "no older version is retained"
            )
            raise CorruptCheckpointError(
                f"version {version} cannot be restored from either level. local: {local_problem}; DFS: {exc}. "
                f"{previous}."
            ) from exc
        return Restored(version, "dfs", manifests[0].metadata)

    def retained_versions(self) -> list[int]:
        """Versions with a marker on either level, oldest first."""
        return sorted(set(self.local.versions()) | set(self.dfs.committed_versions()))

    def _shard_count_problems(self, version: int, shards: int) -> list[str]:
        """The shard count error of ``version`` as a problem (empty when it matches)."""
        try:
            self._check_shard_count(version, shards)
        except ShardCountError as exc:
            return [str(exc)]
        return []

    def _check_shard_count(self, version: int, shards: int) -> None:
        if shards != self.shards:
            raise ShardCountError(
                f"version {version} was written with {shards} shards, but spark.misa.state.shards is {self.shards} "
                f"now: the state would be split differently and keys would be lost. Run with "
                f"spark.misa.state.shards={shards}, or start from a new checkpoint location and state locations."
            )
