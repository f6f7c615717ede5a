"""A batch's output rows while they are still on the state hosts.

An output of at most ``spark.misa.state.hostOutputDriverRows`` rows, and any output for a Python callable sink, is
fetched by the driver as one Arrow table (for a small output that costs less than the hosts' writes or a Spark job).
A larger one stays where it is: the Parquet sink (:class:`~misa.io.spread.SpreadSink`, also through ``from_query``
when no step above the stateful node needs Spark) has the hosts write their rows themselves; another sink that
writes DataFrames (:class:`~misa.io.dataframe_sink.FrameSink`: ``DataFrameSink``, ``from_query``'s output) gets
them as a DataFrame that Spark's tasks read from the hosts (one task per host, over Flight). Either way the rows
never pass the driver.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from misa.hosts.server import Output, fetch_output, write_on_host
from misa.io.spread import PartWriter
from misa.parallel.routing import concatenated


@dataclass(frozen=True)
class HostRows:
    """The output each host left (``outputs[i]`` on the host at ``locations[i]``; ``key``: the hosts' launch's);
    ``recovered`` replaces the hosts lost since and gives the rows where they are now (None: no host was lost);
    up to ``driver_rows`` rows the driver fetches them for the sink (:attr:`by_driver`)."""

    locations: tuple[str, ...]
    outputs: tuple[Output, ...]
    key: bytes
    recovered: Callable[[], HostRows | None] | None = None
    driver_rows: int = 0

    @property
    def by_driver(self) -> bool:
        """Whether the driver fetches the rows (few: a Spark job to read them would cost more than the fetch)."""
        return self.num_rows <= self.driver_rows

    @property
    def hosts(self) -> int:
        return len(self.outputs)

    @property
    def num_rows(self) -> int:
        return sum(o.rows for o in self.outputs)

    @property
    def schema(self) -> pa.Schema | None:
        """The output's columns (None: no host's output has any)."""
        shaped = [o for o in self.outputs if o.schema]
        return pa.ipc.read_schema(pa.py_buffer(shaped[0].schema)) if shaped else None

    @property
    def num_columns(self) -> int:
        schema = self.schema
        return 0 if schema is None else len(schema)

    def table(self) -> pa.Table:
        """Every host's rows, fetched by the driver."""
        return concatenated([fetch_output(loc, out.handle, self.key) for loc, out in zip(self.locations, self.outputs)])

    def write_where_they_are(self, groups: Sequence[Sequence[int]], write: PartWriter) -> list[str]:
        """Each group's rows written as part ``i`` by the group's first host (it fetches the others' from them), all
        groups at once; the names ``write`` returned (:class:`~misa.io.spread.SpreadRows`)."""
        calls = [
            (self.locations[group[0]], i, [(self.locations[h], self.outputs[h].handle) for h in group])
            for i, group in enumerate(groups)
            if any(self.outputs[h].rows for h in group)
        ]
        if not calls:
            return []
        with ThreadPoolExecutor(len(calls)) as pool:
            return list(pool.map(lambda call: write_on_host(*call, write, self.key), calls))

    def frame(self, spark: SparkSession) -> DataFrame:
        """The rows as a DataFrame read from the hosts by Spark's tasks (one per host that has rows)."""
        schema = self.schema
        assert schema is not None, "an output without columns has no DataFrame"
        sources = [(loc, out) for loc, out in zip(self.locations, self.outputs) if out.rows]
        wire, key = schema.serialize().to_pybytes(), self.key

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            target = pa.ipc.read_schema(pa.py_buffer(wire))
            for batch in batches:
                for index in batch.column(0).to_pylist():
                    location, out = sources[index]
                    yield from fetch_output(location, out.handle, key).cast(target).to_batches()

        ids = spark.range(0, len(sources), 1, max(1, len(sources)))
        return ids.mapInArrow(read, from_arrow_schema(schema))
