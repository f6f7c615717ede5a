"""A batch's output while its rows are spread over the state hosts, and a sink that writes them where they are.

With the state on the executors each host holds its partitions' output rows. A :class:`SpreadSink` (the Parquet
sink) has the hosts write those rows themselves: each group of hosts' rows is written by the group's first host,
which fetches the others' over Arrow Flight, so the rows pass neither the driver nor a Spark job.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, runtime_checkable

import pyarrow as pa

PartWriter = Callable[[int, pa.Table], str]  # (part number, its rows) -> the name of what it wrote


@runtime_checkable
class SpreadRows(Protocol):
    """Output rows left on ``hosts`` state hosts, of the Arrow ``schema``."""

    @property
    def hosts(self) -> int: ...

    @property
    def schema(self) -> pa.Schema | None: ...

    def write_where_they_are(self, groups: Sequence[Sequence[int]], write: PartWriter) -> list[str]:
        """Each group's rows (its hosts', in order) written as part ``i`` (the group's place) by the group's first
        host, in parallel; the names ``write`` returned (none for a group without rows)."""


@runtime_checkable
class SpreadSink(Protocol):
    """A sink that writes a batch's output where the state hosts hold it."""

    def write_spread(self, batch_id: int, rows: SpreadRows) -> bool:
        """Write the batch's ``rows`` where they are; False: this sink cannot (nothing written: write them another
        way)."""
