"""Arrow tables between processes through POSIX shared memory: one IPC stream per table, no pickling per row.

The writer puts a table in a new segment and passes its :class:`SharedTable` (name and size) over a pipe; the
reader copies the stream out once and unlinks the segment, so a segment lives from one send to one receive.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import pyarrow as pa


@dataclass(frozen=True)
class SharedTable:
    """A table waiting in shared memory segment ``name`` as an IPC stream of ``size`` bytes."""

    name: str
    size: int


def share(table: pa.Table) -> SharedTable:
    """Put ``table`` in a new shared memory segment (the reader unlinks it)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    stream = sink.getvalue()
    memory = shared_memory.SharedMemory(create=True, size=max(1, stream.size))
    resource_tracker.unregister(memory._name, "shared_memory")  # type: ignore[attr-defined]  # the reader unlinks it
    try:
        memory.buf[: stream.size] = memoryview(stream).cast("B")
        return SharedTable(memory.name, stream.size)
    finally:
        memory.close()


def take(shared: SharedTable) -> pa.Table:
    """The table in ``shared``, copied out of its segment, which is then unlinked."""
    memory = shared_memory.SharedMemory(name=shared.name)
    try:
        stream = pa.py_buffer(bytes(memory.buf[: shared.size]))
    finally:
        memory.close()
        memory.unlink()
    with pa.ipc.open_stream(stream) as reader:
        return reader.read_all()


def discard(shared: SharedTable) -> None:
    """Unlink ``shared`` without reading it (its reader is gone)."""
    try:
        memory = shared_memory.SharedMemory(name=shared.name)
    except FileNotFoundError:
        return
    memory.close()
    memory.unlink()
