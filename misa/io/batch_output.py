"""Per-batch output folders on any location (a path, ``file://``, ``s3://``), replaced whole per batch id.

Layout under the root::

    batch_id=N/<stem>-<attempt><ext>     the data files of one attempt at batch N
    batch_id=N/_committed                JSON: the attempt and its files; written last

An attempt writes its own files under names no other attempt uses, then replaces the pointer in
one step (an atomic rename on local disk, after fsync; a single PUT on an object store). Readers
(:meth:`BatchFolders.committed`) read only the files a pointer names, so they never see a
half-written or half-replaced batch, and a crash at any moment leaves the previous attempt whole.
Files of other attempts are removed after the pointer moves (best effort; readers ignore them).
Spark's readers skip names starting with ``_``, but they would read every attempt's files: read
these folders with :meth:`BatchFolders.committed` (``misa.io.sink.read_batches``).

On a local file system a batch folder or pointer that is a symbolic link (or lies below one) is
refused with :class:`checkpoint.exceptions.LinkedPathError` naming it, never followed: a planted
``batch_id=N`` link would otherwise make a replay delete the link target's files as an earlier
attempt's and write its own there. Object stores have no links.
"""

from __future__ import annotations

import json
import logging
import posixpath
import uuid
from pathlib import Path
from typing import Mapping

from checkpoint.local import refuse_links, write_atomically
from common.location import Location, parse

log = logging.getLogger(__name__)
POINTER = "_committed"


def attempt_name(name: str, attempt: str) -> str:
    """The name file ``name`` of an attempt has in its batch's folder (``part.parquet`` -> ``part-<attempt>.parquet``),
    which no other attempt uses."""
    stem, dot, ext = name.partition(".")
    return f"{stem}-{attempt}{dot}{ext}"


class BatchFolders:
    """The per-batch folders under one root location."""

    def __init__(self, root: str | Path | Location):
        self.location = parse(root)
        self.fs, self.root = self.location.filesystem()

    def folder(self, batch_id: int) -> str:
        """The folder of batch ``batch_id``; on local disk never one that a link leads elsewhere."""
        return self._own(posixpath.join(self.root, f"batch_id={batch_id}"))

    def commit(self, batch_id: int, files: Mapping[str, bytes]) -> None:
        """Make ``files`` (name -> bytes) batch ``batch_id``'s output, replacing any earlier attempt's."""
        attempt = self.new_attempt(batch_id)
        folder = self.folder(batch_id)
        names = []
        for name, data in files.items():
            names.append(attempt_name(name, attempt))
            self._write(posixpath.join(folder, names[-1]), data)
        self.point(batch_id, attempt, names)

    def new_attempt(self, batch_id: int) -> str:
        """A new attempt at batch ``batch_id``: its id, its folder made. Its files go in :meth:`folder_url`, named
        by :func:`attempt_name`; :meth:`point` then makes them the batch's output."""
        self.fs.makedirs(self.folder(batch_id), exist_ok=True)
        return uuid.uuid4().hex[:12]

    def folder_url(self, batch_id: int) -> str:
        """The fsspec URL of batch ``batch_id``'s folder (for writers in other processes, such as Spark's tasks)."""
        return self.location.child(f"batch_id={batch_id}").url

    def point(self, batch_id: int, attempt: str, names: list[str]) -> None:
        """Make the files ``names`` of ``attempt``, written in the batch's folder, batch ``batch_id``'s output, in
        one step, then remove every other attempt's files."""
        folder = self.folder(batch_id)
        pointer = json.dumps({"batch_id": batch_id, "attempt": attempt, "files": names}).encode()
        self._write(posixpath.join(folder, POINTER), pointer)
        self._remove_other_files(folder, keep={POINTER, *names})

    def remove(self, batch_id: int) -> None:
        """Make batch ``batch_id`` have no output: its pointer goes first (one step), then its files."""
        folder = self.folder(batch_id)
        if not self.fs.exists(folder):
            return
        try:
            self.fs.rm_file(posixpath.join(folder, POINTER))
        except FileNotFoundError:
            pass
        self._remove_other_files(folder, keep=set())
        try:
            self.fs.rmdir(folder)
        except OSError:  # object stores have no folders; a local one may hold a stray file
            pass

    def committed(self) -> list[tuple[int, list[str]]]:
        """Every batch with a committed attempt, in batch id order, with the paths of its files."""
        found = []
        self.fs.invalidate_cache()  # another process (or attempt) may have committed since the last listing
        for folder in self.fs.glob(posixpath.join(self.root, "batch_id=*")):  # links too: they are refused
            try:
                raw = json.loads(self.fs.cat_file(self._own(posixpath.join(folder, POINTER))))
            except (FileNotFoundError, NotADirectoryError):  # a crash before the pointer, a removed batch
                continue
            found.append((int(raw["batch_id"]), [posixpath.join(folder, name) for name in raw["files"]]))
        return sorted(found)

    def read(self, path: str) -> bytes:
        return self.fs.cat_file(path)

    def _own(self, path: str) -> str:
        """``path`` (below the root); on local disk a :class:`LinkedPathError` when a link leads it elsewhere."""
        return path if self.location.local is None else refuse_links(self.root, path)

    def _write(self, path: str, data: bytes) -> None:
        """Write ``path`` whole: on local disk through a temporary name, fsynced, then renamed (and the
        folder fsynced); on an object store one PUT, which replaces an object in one step."""
        if self.location.local is None:
            self.fs.pipe_file(path, data)
        else:
            write_atomically(Path(path), data)

    def _remove_other_files(self, folder: str, keep: set[str]) -> None:
        """Delete the folder's files not in ``keep`` (earlier attempts); failures are only logged."""
        try:
            present = self.fs.ls(folder, detail=False)
        except FileNotFoundError:
            return
        for path in present:
            if posixpath.basename(path.rstrip("/")) not in keep:
                try:
                    self.fs.rm_file(path)
                except OSError as exc:
                    log.warning("could not remove %s of an earlier attempt: %s", path, exc)
