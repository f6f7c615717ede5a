"""Spark's own checkpoint, local first and mirrored to the checkpoint location off the critical path.

Spark writes its ``offsets/``, ``commits/`` and file-source ``sources/<i>/`` logs synchronously before and
after every batch; on a remote DFS each entry costs round trips that the batch waits for. With
``spark.misa.checkpoint.mirrorSparkLog`` (the default), Spark works on a local copy of its checkpoint
(``STATE_DIR/spark-checkpoint``) and :class:`SparkLogMirror` copies every new or changed file of it to the
checkpoint location the user gave (the *mirror*), and removes there what Spark removed locally, as a step
of each version's upload, before the version's DFS marker. So ack 2 of version ``v`` covers the log files
``v`` needs (``offsets/v``, ``commits/v-1`` and the source entries planned with them, all written before
Spark called the batch), and the mirror keeps recovery's rule with the durable state V: Spark's last
commit C in the mirror is at least V - 1 (covered by ack 2) and at most V + 1 (the local log never runs
further ahead). Copies go in the order Spark writes, batch by batch (a batch's sources, offsets, commits),
removals in the reverse order, highest batch first; each file is written whole (a temporary name renamed
where the file system renames, a single PUT on object stores), so a crash between any two steps leaves a
mirror that recovery handles.

Which copy counts at start (:meth:`SparkLogMirror.prepare`): the local copy when this state dir mirrored
last, that is when its index (``STATE_DIR/spark-checkpoint.json``) names the id the mirror records
(``CHECKPOINT/misa-mirror.json``); the local copy is then as new as the mirror or newer. Otherwise (a new
machine, a wiped disk, another driver that ran since, a checkpoint from before mirroring) the local copy is
replaced by a download of the mirror, and the mirror gets a new id. Files written at the checkpoint
location by hand while a local copy counts are not seen: remove ``STATE_DIR/spark-checkpoint.json`` to make
the next start take the checkpoint location as it is.
"""

from __future__ import annotations

import json
import logging
import posixpath
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from checkpoint import Fence, no_fence
from checkpoint.local import write_atomically
from checkpoint.owner import this_driver
from checkpoint.parallel import parallel_map
from checkpoint.requests import CountedFileSystem
from checkpoint.retry import RetryPolicy
from common import failpoints
from common.location import Location, local_location

log = logging.getLogger(__name__)

LOCAL_COPY = "spark-checkpoint"
MIRROR_ID_FILE = "misa-mirror.json"
#: What Spark keeps under a checkpoint location, in the order it writes a batch's entries.
SPARK_ENTRIES = ("metadata", "sources", "state", "offsets", "commits")
#: File systems whose writes become visible whole only through a rename (object stores PUT a file whole).
_RENAMING_SCHEMES = ("file", "local", "hdfs", "viewfs", "webhdfs", "sftp", "ssh")

Snapshot = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns) of the local file


@dataclass
class MirrorStats:
    """What one mirror step did: files copied and removed, bytes, requests to the mirror, seconds."""

    files_copied: int = 0
    files_removed: int = 0
    bytes_copied: int = 0
    requests: int = 0
    seconds: float = 0.0


class SparkLogMirror:
    """Spark's checkpoint as a local copy under ``state_dir`` mirrored to ``remote`` (see the module docstring)."""

    def __init__(self, state_dir: Path, remote: Location, retry: RetryPolicy, threads: int = 4):
        self.local_root = state_dir / LOCAL_COPY
        self.index_path = state_dir / f"{LOCAL_COPY}.json"
        self.remote = remote
        fs, self.root = remote.filesystem()
        self.fs = CountedFileSystem(fs)
        self.retry = retry
        self.threads = threads
        scheme = remote.url.split("://", 1)[0].lower() if "://" in remote.url else "file"
        self._renames = scheme in _RENAMING_SCHEMES
        self._mirror_id = ""
        self._mirrored: Snapshot = {}  # what the mirror holds, as the local file was when it was copied
        self._folders: set[str] = set()  # folders of the mirror known to exist
        self._lock = threading.Lock()  # one step at a time (a replaced upload thread may still be in one)

    @property
    def local(self) -> Location:
        """Where Spark's checkpoint is for the query: the local copy."""
        return local_location(self.local_root)

    # ------------------------------------------------------------------ start
    def prepare(self, fence: Fence = no_fence) -> bool:
        """Make the local copy the one the query continues from; True when it was downloaded from the mirror
        (local state versions newer than the durable one then belong to another run and must not count)."""
        remote_id = self._remote_id()
        index = self._read_index()
        if index is not None and index["mirror"] == remote_id and self._local_intact(index["files"]):
            self._mirror_id, self._mirrored = remote_id, {k: tuple(v) for k, v in index["files"].items()}
            return False
        self._download()
        fence()
        self._mirror_id = uuid.uuid4().hex
        record = {"id": self._mirror_id, "driver": this_driver(), "time": time.time()}
        self._put(MIRROR_ID_FILE, json.dumps(record).encode())
        self._mirrored = self._snapshot()
        self._write_index()
        return True

    def _remote_id(self) -> str:
        try:
            path = self._abs(MIRROR_ID_FILE)
            raw = self.retry.call(f"read of {self.remote}/{MIRROR_ID_FILE}", lambda: self.fs.cat_file(path))
        except FileNotFoundError:
            return ""
        try:
            return str(json.loads(raw)["id"])
        except (ValueError, KeyError, TypeError):
            return ""  # a torn record: the mirror is taken as it is

    def _read_index(self) -> dict[str, Any] | None:
        try:
            index = json.loads(self.index_path.read_bytes())
            return index if isinstance(index.get("files"), dict) and index.get("mirror") else None
        except (OSError, ValueError):
            return None

    def _local_intact(self, files: dict[str, list[int]]) -> bool:
        """Whether the local copy is still there: its ``metadata`` when the mirror has it (a copy removed by
        hand beside its index). Files Spark removed since the index was written do not count."""
        return "metadata" not in files or (self.local_root / "metadata").is_file()

    def _download(self) -> None:
        """Replace the local copy by the mirror's Spark entries (index first, so a crash leaves none)."""
        self.index_path.unlink(missing_ok=True)
        shutil.rmtree(self.local_root, ignore_errors=True)
        self.local_root.mkdir(parents=True)
        remote_files = self._remote_files()
        log.log(
            logging.WARNING if set(remote_files) - {"metadata"} else logging.INFO,  # a new query has metadata only
            "restoring Spark's checkpoint from %s (%d files) into %s",
            self.remote,
            len(remote_files),
            self.local_root,
        )

        def fetch(rel: str) -> None:
            data = self.retry.call(f"read of {self.remote}/{rel}", lambda: self.fs.cat_file(self._abs(rel)))
            dest = self.local_root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)

        self._each(fetch, remote_files, threads=max(self.threads, 8))

    def _remote_files(self) -> list[str]:
        """Relative paths of the Spark entries at the checkpoint location (no hidden or checksum files)."""
        found = []
        for entry in SPARK_ENTRIES:
            path = self._abs(entry)
            try:
                if entry == "metadata":
                    self.fs.info(path)
                    found.append(entry)
                    continue
                names = self.retry.call(f"listing of {self.remote}/{entry}", partial(self.fs.find, path))
            except FileNotFoundError:
                continue
            for name in names:
                rel = posixpath.relpath(self.fs._strip_protocol(name), self.root)
                if _is_spark_file(rel):
                    found.append(rel)
        return found

    # ------------------------------------------------------------------ mirror
    def sync(self, fence: Fence = no_fence) -> MirrorStats:
        """Copy what Spark added or changed locally since the last step to the mirror, then remove there what
        Spark removed; ``fence`` is called before each file."""
        with self._lock:
            return self._sync(fence)

    def _sync(self, fence: Fence) -> MirrorStats:
        started = time.monotonic()
        stats = MirrorStats()
        calls = self.fs.calls
        current = self._snapshot()
        changed = [rel for rel, stamp in current.items() if self._mirrored.get(rel) != stamp]
        removed = [rel for rel in self._mirrored if rel not in current]
        for group in _in_write_order(changed):
            sizes = self._each(lambda rel: self._copy(rel, fence), group)
            stats.files_copied += len(group)
            stats.bytes_copied += sum(sizes)
            for rel in group:
                self._mirrored[rel] = current[rel]
            failpoints.hit("mirror.after_copy")
        for group in reversed(_in_write_order(removed)):
            self._each(lambda rel: self._remove(rel, fence), sorted(group, key=_batch_of, reverse=True))
            stats.files_removed += len(group)
            for rel in group:
                self._mirrored.pop(rel, None)
            failpoints.hit("mirror.after_remove")
        if changed or removed:
            self._write_index()
        stats.requests = self.fs.calls - calls
        stats.seconds = time.monotonic() - started
        return stats

    def _copy(self, rel: str, fence: Fence) -> int:
        fence()
        data = (self.local_root / rel).read_bytes()
        self._put(rel, data)
        return len(data)

    def _put(self, rel: str, data: bytes) -> None:
        """Write one file of the mirror whole: under a temporary name renamed over it where the file system
        renames, else in one PUT."""
        path = self._abs(rel)

        folder = posixpath.dirname(path)

        def attempt() -> None:
            failpoints.hit("mirror.put")
            if folder not in self._folders:
                self.fs.makedirs(folder, exist_ok=True)
                self._folders.add(folder)
            if not self._renames:
                self.fs.pipe_file(path, data)
                return
            tmp = posixpath.join(folder, f".{posixpath.basename(path)}.misa-tmp")
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, path)

        self.retry.call(f"mirror of {rel} to {self.remote}", attempt)

    def _remove(self, rel: str, fence: Fence) -> None:
        fence()

        def attempt() -> None:
            try:
                self.fs.rm_file(self._abs(rel))
            except FileNotFoundError:
                pass

        self.retry.call(f"removal of {self.remote}/{rel}", attempt)

    # ------------------------------------------------------------------ helpers
    def _snapshot(self) -> Snapshot:
        """(size, mtime_ns) of every Spark file in the local copy."""
        found: Snapshot = {}
        for entry in SPARK_ENTRIES:
            top = self.local_root / entry
            paths = [top] if top.is_file() else top.rglob("*") if top.is_dir() else []
            for path in paths:
                rel = path.relative_to(self.local_root).as_posix()
                if _is_spark_file(rel) and path.is_file():
                    stat = path.stat()
                    found[rel] = (stat.st_size, stat.st_mtime_ns)
        return found

    def _write_index(self) -> None:
        index = {"mirror": self._mirror_id, "files": {k: list(v) for k, v in sorted(self._mirrored.items())}}
        write_atomically(self.index_path, json.dumps(index).encode())

    def _abs(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def _each(self, fn: Callable[[str], Any], items: list[str], threads: int | None = None) -> list[Any]:
        """``fn`` over ``items`` on up to ``threads`` threads (the first error raised)."""
        return parallel_map(fn, items, threads or self.threads, "misa-mirror")


def _is_spark_file(rel: str) -> bool:
    """A file Spark reads: not a hidden one (Hadoop's ``.N.crc`` checksums, temporary entries, ours)."""
    return not any(part.startswith(".") for part in rel.split("/"))


def _batch_of(rel: str) -> int:
    """The batch (or log) number a log file is named by; -1 for others."""
    head = posixpath.basename(rel).split(".")[0]
    return int(head) if head.isdigit() else -1


def _in_write_order(rels: Iterable[str]) -> list[list[str]]:
    """``rels`` in groups in the order Spark writes them: batch by batch, and within a batch its source entries,
    its offsets entry, then its commit entry (:data:`SPARK_ENTRIES`); one group per batch and entry. A step that
    sees two batches' files (batch b's commit and batch b+1's plan) so never mirrors b+1's offsets before b's
    commit, which Spark's restart would read as a batch to run past an uncommitted one."""
    rank = {entry: index for index, entry in enumerate(SPARK_ENTRIES)}
    groups: dict[tuple[int, int], list[str]] = {}
    for rel in rels:
        groups.setdefault((_batch_of(rel), rank[rel.split("/", 1)[0]]), []).append(rel)
    return [sorted(groups[key]) for key in sorted(groups)]


def forget_mirror(remote: Location) -> None:
    """Spark writes its log at ``remote`` itself (a run without the mirror): remove the mirror's id there, so that
    the next start with the mirror takes the log from ``remote``, not from a local copy older than it."""
    fs, root = remote.filesystem()
    path = posixpath.join(root, MIRROR_ID_FILE)
    if fs.exists(path):
        log.warning(
            "this run writes Spark's log at %s itself: the local copy of an earlier run no longer counts", remote
        )
        fs.rm(path)


def spark_checkpoint_uri(location: Location) -> str:
    """The local copy as Spark's ``checkpointLocation``: ``file:`` and the path as it is, so that a cluster whose
    default file system is HDFS still writes it to this machine's disk. Not percent-encoded: Hadoop's ``Path`` does
    not decode a URL, and ``/a b`` sent as ``file:///a%20b`` is written to a folder named ``a%20b``."""
    assert location.local is not None
    return f"file:{location.local.resolve()}"
