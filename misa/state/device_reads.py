"""Bytes this process has read from storage devices: Linux's per-process I/O accounting (``/proc/self/io``).

Reads the OS page cache serves are not counted; reads that reach a disk are, direct reads included,
from every thread of the process. :class:`misa.state.view.StateView` counts them over a batch's state
reads, so that prefetching ``auto`` can tell reads that wait on a device (which hints can hide) from
reads served from memory (CPU work, which hints would only move to another thread of the same cores).
"""

from __future__ import annotations

PROC_IO = "/proc/self/io"


def device_bytes_read(path: str = PROC_IO) -> int | None:
    """The process's ``read_bytes`` so far; None where the system does not account it (not Linux)."""
    try:
        with open(path, "rb") as counters:
            for line in counters:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
