"""Spark's own checkpoint logs (``offsets/``, ``commits/`` and the file sources' ``sources/<i>/``): the one
reader of them (recovery, the hints ahead, the benchmarks and the soak), and the trimming recovery does,
through fsspec, so it works for every location Spark accepts (a path, ``file:/x``, ``s3a://``, ``hdfs://``)."""

from __future__ import annotations

import json
import logging
import posixpath
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from checkpoint.local import write_atomically
from common import failpoints
from common.location import Location, parse
from misa.state.store import EMPTY_VERSION

#: A temporary file Hadoop's CheckpointFileManager writes an entry into before renaming it (``.N.<uuid>.tmp``),
#: with the checksum file its local file system keeps beside it; a kill between the two leaves it behind.
_TEMP_ENTRY = re.compile(r"^\.+(\d+)\.[0-9a-fA-F-]{36}\.tmp(\.crc)?$")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceFile:
    """A file that a file source's log assigned to one of the source's batches."""

    path: str
    batch: int  # the source's batch id, which an offsets entry names as the source's ``logOffset``

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@dataclass(frozen=True)
class SourceEntry:
    """One entry of a file source's log: ``N``, or ``N.compact``, which repeats every entry up to ``N``."""

    number: int
    files: tuple[SourceFile, ...]


class SparkCheckpointLog:
    """Spark's logs under one checkpoint location: the batch ids of the offsets and commits logs, what an
    offsets entry planned, and the files each file source's log entry lists."""

    def __init__(self, location: str | Path | Location):
        self.location = parse(location)
        self.fs, self.root = self.location.filesystem()

    def _folder(self, name: str) -> str:
        return posixpath.join(self.root, name)

    def batch_ids(self, folder: str) -> list[int]:
        """The batch ids logged in ``folder`` ("offsets" or "commits"), oldest first."""
        path = self._folder(folder)
        self.fs.invalidate_cache(path)
        try:
            names = self.fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in (posixpath.basename(p.rstrip("/")) for p in names) if n.isdigit())

    def query_id(self) -> str:
        """Spark's id of the query that owns this checkpoint (its ``metadata`` file). A new checkpoint gets
        one now, written as Spark writes it, so that the state can be claimed before the query starts
        (Spark keeps an existing ``metadata``)."""
        path = self._folder("metadata")
        try:
            return str(json.loads(self.fs.cat_file(path))["id"])
        except FileNotFoundError:
            pass
        query_id = str(uuid.uuid4())
        data = json.dumps({"id": query_id}).encode()
        if self.location.local is None:
            self.fs.makedirs(self.root, exist_ok=True)
            self.fs.pipe_file(path, data)
        else:
            write_atomically(Path(path), data)
        return query_id

    def last_committed(self) -> int:
        """The newest batch in the commits log (``EMPTY_VERSION``: none)."""
        return max(self.batch_ids("commits"), default=EMPTY_VERSION)

    def file_source_offsets(self, batch_id: int) -> dict[int, int]:
        """Source index -> its ``logOffset`` in offsets entry ``batch_id``, for the sources that have
        one (Spark's file sources); others keep no log under ``sources/`` that replays could skew."""
        lines = self.fs.cat_file(posixpath.join(self._folder("offsets"), str(batch_id))).decode().splitlines()
        found = {}
        for index, line in enumerate(lines[2:]):  # a version line, the batch metadata, then one line per source
            try:
                offset = json.loads(line)
            except ValueError:
                continue
            if isinstance(offset, dict) and isinstance(offset.get("logOffset"), int):
                found[index] = offset["logOffset"]
        return found

    def source_entries(self, source: int = 0, after: int = EMPTY_VERSION) -> list[SourceEntry]:
        """The entries of file source ``source``'s log numbered after ``after``, oldest first, without the
        plain entries a compact entry repeats (Spark deletes them only later)."""
        names = self._entry_names(source)
        compacted = max((n for n, name in names if name.endswith(".compact")), default=EMPTY_VERSION)
        folder = self._folder(f"sources/{source}")
        return [
            SourceEntry(number, _source_files(self.fs.cat_file(posixpath.join(folder, name)).decode()))
            for number, name in names
            if number > after and number >= compacted
        ]

    def batch_files(self, source: int = 0) -> dict[int, tuple[SourceFile, ...]]:
        """Batch id -> the files file source ``source`` gave the batch (its log's batches after the previous
        offsets entry's ``logOffset``, to the batch's own), for the batches that read some."""
        by_source_batch: dict[int, list[SourceFile]] = {}
        for entry in self.source_entries(source):
            for file in entry.files:
                by_source_batch.setdefault(file.batch, []).append(file)
        found: dict[int, tuple[SourceFile, ...]] = {}
        previous = EMPTY_VERSION
        for batch in self.batch_ids("offsets"):
            offset = self.file_source_offsets(batch).get(source, previous)
            files = tuple(f for b in range(previous + 1, offset + 1) for f in by_source_batch.get(b, ()))
            if files:
                found[batch] = files
            previous = offset
        return found

    def make_spark_replay(self, batch_id: int) -> None:
        """Make Spark run ``batch_id`` (and what follows) again from its logged offsets, planned as it
        first was: remove the file sources' log entries past their offsets in ``batch_id``, then the
        offsets entries after it, then the commit entries from it on (each highest first). A crash
        between any two steps leaves logs that the next recovery handles the same way (commits never
        end before the offsets that follow them)."""
        if batch_id not in self.batch_ids("offsets"):
            raise FileNotFoundError(
                f"Spark's offsets log at {self.location} has no entry for batch {batch_id}, "
                f"so Spark cannot replay it (spark.sql.streaming.minBatchesToRetain)"
            )
        self.forget_unplanned_source_entries(batch_id)
        for later in reversed([b for b in self.batch_ids("offsets") if b > batch_id]):
            self._remove("offsets", later)
            failpoints.hit("recovery.after_offset_removed")
        for later in reversed([b for b in self.batch_ids("commits") if b >= batch_id]):
            self._remove("commits", later)
            failpoints.hit("recovery.after_commit_removed")

    def forget_unplanned_source_entries(self, batch_id: int | None = None) -> None:
        """Remove the file sources' log entries past their offsets in offsets entry ``batch_id`` (by
        default the newest; none: every entry). Spark adds a file source's entry before it logs the
        batch's offsets, so a crash in between, or a replay, leaves entries no batch planned; left in
        place, Spark's next batch would span two of the source's batches."""
        if batch_id is None:
            batch_id = max(self.batch_ids("offsets"), default=EMPTY_VERSION)
        planned = self.file_source_offsets(batch_id) if batch_id != EMPTY_VERSION else {}
        for source in self._file_sources():
            self._trim_source_log(source, planned.get(source, EMPTY_VERSION))

    def remove_abandoned_temp_files(self) -> None:
        """Remove the temporary files a killed driver left in the offsets and commits logs for batches those
        logs do not hold (Spark never reads them; left in an empty offsets log, Spark refuses to start
        batch 0 with STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY)."""
        for folder in ("offsets", "commits"):
            newest = max(self.batch_ids(folder), default=EMPTY_VERSION)
            try:
                names = [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self._folder(folder), detail=False)]
            except FileNotFoundError:
                continue
            for name in names:
                match = _TEMP_ENTRY.match(name)
                if match and int(match.group(1)) > newest:
                    log.warning("removing %s/%s/%s, left by a killed driver", self.location, folder, name)
                    self._remove_file(folder, name)

    def _file_sources(self) -> list[int]:
        """Indexes of the sources whose log under ``sources/`` is a file source's (records of files with
        their batch id); other sources (Kafka's initial offsets, for one) are never touched."""
        found = []
        for index in self.batch_ids("sources"):
            entries = self._entry_names(index)
            if entries:
                first = self.fs.cat_file(posixpath.join(self._folder(f"sources/{index}"), entries[0][1]))
                lines = first.decode().splitlines()
                try:
                    record = json.loads(lines[1]) if len(lines) > 1 else None
                except ValueError:
                    record = None
                if isinstance(record, dict) and {"path", "batchId"} <= record.keys():
                    found.append(index)
        return found

    def _entry_names(self, source: int) -> list[tuple[int, str]]:
        """(number, file name) of source ``source``'s log entries, oldest first."""
        folder = self._folder(f"sources/{source}")
        self.fs.invalidate_cache(folder)
        try:
            names = [posixpath.basename(p) for p in self.fs.ls(folder, detail=False)]
        except FileNotFoundError:
            return []
        return sorted((int(n.split(".")[0]), n) for n in names if n.split(".")[0].isdigit())

    def _trim_source_log(self, source: int, log_offset: int) -> None:
        """Remove source ``source``'s log entries past ``log_offset``, highest first; a compacted
        entry past it is rewritten without the files of those batches."""
        folder = self._folder(f"sources/{source}")
        for number, name in reversed(self._entry_names(source)):
            if number <= log_offset:
                break
            self._remove(f"sources/{source}", name)  # a compacted entry's checksum file goes first
            if name.endswith(".compact"):
                self._rewrite_compact(posixpath.join(folder, name), log_offset)
            failpoints.hit("recovery.after_source_entry_trimmed")

    def _rewrite_compact(self, path: str, log_offset: int) -> None:
        version, *records = self.fs.cat_file(path).decode().splitlines()
        kept = [r for r in records if r.strip() and json.loads(r).get("batchId", 0) <= log_offset]
        data = "\n".join([version, *kept]).encode()
        if self.location.local is None:  # one PUT replaces an object whole
            self.fs.pipe_file(path, data)
        else:  # the temporary name (".N.compact.tmp") is no log entry to Spark
            write_atomically(Path(path), data)

    def _remove(self, folder: str, entry: int | str) -> None:
        """Remove a log entry and the checksum file Hadoop's local file system keeps beside it; a
        ``.compact`` entry keeps its data (it is rewritten, and its old checksum would not match)."""
        names = [f".{entry}.crc"] + ([] if str(entry).endswith(".compact") else [str(entry)])
        for name in names:  # the entry itself last
            self._remove_file(folder, name)

    def _remove_file(self, folder: str, name: str) -> None:
        try:
            self.fs.rm_file(posixpath.join(self._folder(folder), name))
        except FileNotFoundError:
            pass


def _source_files(text: str) -> tuple[SourceFile, ...]:
    """The files a file source's log entry lists (after its version line, one JSON record per line)."""
    records = (json.loads(line) for line in text.splitlines()[1:] if line.strip())
    return tuple(SourceFile(r["path"], int(r["batchId"])) for r in records)
