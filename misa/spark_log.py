"""Spark's own checkpoint logs (``offsets/`` and ``commits/``), read and trimmed through fsspec, so
recovery works for every location Spark accepts (a path, ``file:/x``, ``s3a://``, ``hdfs://``)."""
from __future__ import annotations

import posixpath

from checkpoint import failpoints
from checkpoint.location import Location

EMPTY = -1  # no batch committed yet


class SparkCheckpointLog:
    """The batch ids in Spark's offsets and commits logs under one checkpoint location."""

    def __init__(self, location: Location):
        self.location = location
        self.fs, self.root = location.filesystem()

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

    def last_committed(self) -> int:
        return max(self.batch_ids("commits"), default=EMPTY)

    def make_spark_replay(self, batch_id: int) -> None:
        """Make Spark run ``batch_id`` again from its logged offsets: remove the offsets entries after
        it (highest first), then its commit entry. A crash between any two steps leaves logs that the
        next recovery handles the same way (commits never end before the offsets that follow them)."""
        for later in reversed([b for b in self.batch_ids("offsets") if b > batch_id]):
            self._remove("offsets", later)
            failpoints.hit("recovery.after_offset_removed")
        self._remove("commits", batch_id)
        failpoints.hit("recovery.after_commit_removed")

    def _remove(self, folder: str, batch_id: int) -> None:
        for name in (f".{batch_id}.crc", str(batch_id)):  # the entry itself last
            try:
                self.fs.rm_file(posixpath.join(self._folder(folder), name))
            except FileNotFoundError:
                pass
