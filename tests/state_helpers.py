"""Small helpers shared by the state and checkpoint tests."""

from __future__ import annotations

import random

import pyarrow as pa

from misa.operators.base import OperatorResult
from misa.state.store import StateStore
from misa.state.version import BatchVersion
from misa.state.view import StateView


def key(i: int) -> bytes:
    return i.to_bytes(8, "big")


def fill(store: StateStore, n: int, seed: int, start: int = 0) -> dict[bytes, bytes]:
    """Put ``n`` keys from ``start`` with seeded random values; return what was written."""
    rng = random.Random(seed)
    data = {key(i): rng.randbytes(rng.randint(1, 40)) for i in range(start, start + n)}
    store.write(data.items())
    return data


def contents(store: StateStore) -> dict[bytes, bytes]:
    return dict(store.scan())


def pending_version(
    view: StateView, version: int, changes: dict[bytes, bytes | None], *ranges: tuple[bytes, bytes]
) -> BatchVersion:
    """Version ``version`` with ``ranges`` deleted, then ``changes``, frozen by the view and handed to a commit
    that has not applied it yet: its buffer is pending below the read cache."""
    for begin, end in ranges:
        view.delete_range(begin, end)
    view.put_many(list(changes), list(changes.values()))
    frozen = view.freeze(version)
    frozen.hand_over()
    return frozen


def apply_then_idle(op, deltas: pa.Table, view: StateView) -> OperatorResult:
    """A data batch and the batch without data Spark runs after it when no input waits (input fed a file at a time),
    their outputs as one."""
    data, no_data = op.apply(deltas, view), op.no_data_batch(view)
    output = data.output
    if no_data.output.num_rows:
        output = pa.concat_tables([output, no_data.output.cast(output.schema)])
    return OperatorResult(
        output,
        late_rows=data.late_rows,
        state_reads=data.state_reads + no_data.state_reads,
        dropped_rows=data.dropped_rows,
        closed_windows=data.closed_windows + no_data.closed_windows,
    )
