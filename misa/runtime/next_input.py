"""The next batch's input before Spark plans it: files that arrived in a file source's folder and no batch read yet.

Under a processing-time trigger the driver idles between the end of a batch and the next trigger,
while the next batch's files are often already there. :class:`FileSourcePeek` names them: it lists
the source folder (as Spark's file source does: names starting with ``_`` or ``.`` are not input)
and leaves out every file Spark's source log (``CHECKPOINT/sources/<i>/``) assigned to a batch,
read incrementally, and the files the caller has seen already. With ``maxFilesPerTrigger`` the next
batch takes the oldest files (by modification time, then name), so only those are named. The runtime
extracts their keys and prefetches them while the driver would idle (:mod:`misa.runtime.batch_hints`).

A job that can give the files' hint rows in Arrow (``hint_rows``: its last hint stage run on the driver,
for example over :func:`misa.io.json_arrow.read_json_lines_arrow`) spares the hint job: a Spark job per
file costs about 20 times the CPU of reading it with pyarrow, on the cores the batches need. Files it
cannot read so (``ArrowInvalid``: a record Spark would set aside) are read by Spark as without it.
"""

from __future__ import annotations

import copy
import logging
import posixpath
from dataclasses import dataclass
from typing import Callable, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame

from common.location import Location
from misa.runtime.hadoop_fs import resolve_location
from misa.runtime.spark_log import SparkCheckpointLog
from misa.state.store import EMPTY_VERSION

log = logging.getLogger(__name__)
Reader = Callable[[list[str]], DataFrame]  # files -> the rows a batch of them gives the foreachBatch function
HintRows = Callable[[list[str]], pa.Table]  # files -> their good records through the job's last hint stage, in Arrow


@dataclass(frozen=True)
class Peek:
    """What a peek found: the next batch's files and their rows (as Spark reads them, or as hint rows read on the
    driver), or why it cannot tell (``reason``)."""

    files: tuple[str, ...] = ()
    frame: DataFrame | None = None
    hint_rows: pa.Table | None = None  # the files' rows through the job's last hint stage, read without Spark
    reason: str = ""  # empty when files were found
    planned: int = EMPTY_VERSION  # the newest batch the source's log shows planned (none, or the source cannot tell)


class NextInput(Protocol):
    """A source whose next batch's input can be read before Spark plans the batch."""

    def peek(self, skip: frozenset[str] = frozenset()) -> Peek:
        """The input the next batch will read, as far as it has arrived, less the files in ``skip``."""

    def follow(self, checkpoint: Location) -> None:
        """Called at start with where the query's Spark checkpoint is (the local copy Spark writes, when the
        runtime mirrors it), for sources whose log there says what a batch read."""


def without_driver_reads(source: NextInput) -> NextInput:
    """``source``, reading the next batch's files only through Spark: with the state on the executors, no input
    record passes the driver (a :class:`FileSourcePeek`'s ``hint_rows`` is left out)."""
    if isinstance(source, FileSourcePeek) and source.hint_rows is not None:
        source = copy.copy(source)
        source.hint_rows = None
    return source


class FileSourcePeek:
    """The arrived, unassigned files of a file source reading ``input_location`` (source ``source`` of the query);
    ``read`` gives their rows as Spark reads them, ``hint_rows`` (optional) their hint rows without Spark."""

    def __init__(
        self,
        input_location: str,
        checkpoint_location: str,
        read: Reader,
        max_files: int | None = None,
        source: int = 0,
        hint_rows: HintRows | None = None,
    ):
        self.fs, self.input = resolve_location(input_location).filesystem()  # both where Spark reads them
        self.source = source
        self.follow(resolve_location(checkpoint_location))
        self.read = read
        self.hint_rows = hint_rows
        self.max_files = max_files
        self._assigned: set[str] = set()  # base names of files some batch read
        self._read_through = EMPTY_VERSION  # the newest log entry read

    def follow(self, checkpoint: Location) -> None:
        self._spark_log = SparkCheckpointLog(checkpoint)

    def _new_files(self) -> list[dict]:
        """The arrived files no batch read yet, oldest first (as Spark takes them)."""
        self._read_log()
        arrived = self.fs.ls(self.input, detail=True)
        new = [f for f in arrived if f.get("type") == "file" and self._is_new(posixpath.basename(f["name"]))]
        new.sort(key=lambda f: (f.get("mtime") or f.get("created") or 0, f["name"]))
        return new

    def peek(self, skip: frozenset[str] = frozenset()) -> Peek:
        try:
            new = self._new_files()
        except OSError as error:  # a log or folder that cannot be read now: no hints, the batch reads as usual
            log.warning("the next batch's input cannot be listed (%s); no hints ahead for it", error)
            return Peek(reason="unreadable", planned=self._read_through)
        next_batch = (self.fs.unstrip_protocol(f["name"]) for f in new[: self.max_files or len(new)])
        names = tuple(name for name in next_batch if name not in skip)
        if not names:
            return Peek(reason="no new files", planned=self._read_through)
        if self.hint_rows is not None:
            try:
                return Peek(names, hint_rows=self.hint_rows(list(names)), planned=self._read_through)
            except (pa.ArrowInvalid, OSError) as error:
                log.info("the next batch's files are read by Spark for hints (%s)", error)
        return Peek(names, self.read(list(names)), planned=self._read_through)

    def _is_new(self, name: str) -> bool:
        return not name.startswith(("_", ".")) and name not in self._assigned

    def _read_log(self) -> None:
        """Add the files of the source log's entries not read yet."""
        for entry in self._spark_log.source_entries(self.source, after=self._read_through):
            self._assigned.update(f.name for f in entry.files)
            self._read_through = entry.number
