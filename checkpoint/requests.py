"""The requests a checkpoint level makes to its storage, counted: on a DFS with tens of milliseconds per round
trip, they are what a version's commit costs."""

from __future__ import annotations

import threading
from typing import Any

#: fsspec calls that reach the storage (each is one request, or on some backends a few: sshfs opens, writes
#: and closes a file; s3fs writes a small file in one PUT, lists a folder in one).
REQUEST_METHODS = frozenset(
    {"ls", "info", "exists", "find", "cat_file", "pipe_file", "open", "rm_file", "rm", "makedirs", "mv"}
)


class CountedFileSystem:
    """An fsspec file system that counts the calls of :data:`REQUEST_METHODS` made through it."""

    def __init__(self, fs: Any):
        self._fs = fs
        self._calls = 0
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        """Calls that reached the storage so far."""
        return self._calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fs, name)
        if name not in REQUEST_METHODS:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._calls += 1
            return attr(*args, **kwargs)

        return counted
