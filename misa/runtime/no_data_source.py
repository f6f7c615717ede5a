"""The source that asks Spark's trigger for a batch without data (:mod:`misa.runtime.no_data_batches`).

Spark reads a Python source in a process of its own, which may lack misa (``PYSPARK_PYTHON`` another Python): this
module needs only the standard library and PySpark, and is pickled by value, so that process never imports misa.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

SOURCE_NAME = "misa-no-data-batch"
OFFSET_KEY = "misaNoDataBatchAfter"  # the source's offset: the batch after which a batch without data was requested
NO_REQUEST = -1


def requested_after(path: str | Path) -> int:
    """The batch after which a batch without data is requested (:data:`NO_REQUEST`: none)."""
    try:
        return int(json.loads(Path(path).read_text())[OFFSET_KEY])
    except FileNotFoundError:
        return NO_REQUEST


class NoDataBatchSource(DataSource):
    """A streaming source without rows whose offset is the newest request in the file named by option ``requests``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return "misa_no_data_batch int"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _RequestReader(self.options["requests"])


class _RequestReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{OFFSET_KEY: n}``: ``n`` moves to the newest request; no partitions, so no rows and no tasks."""

    def __init__(self, requests: str):
        self.requests = requests

    def initialOffset(self) -> dict:
        return {OFFSET_KEY: NO_REQUEST}

    def latestOffset(self, start: dict, limit: Any) -> dict:
        return {OFFSET_KEY: max(int(start[OFFSET_KEY]), requested_after(self.requests))}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return []

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return iter(())

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to fix: a request follows only a batch that moved the watermark, and the batch without data it
        gives moves none, so an availableNow query still ends (after that batch, as Spark's own would)."""


cloudpickle.register_pickle_by_value(sys.modules[__name__])
