"""A StatefulProcessor counting rows per key in value, list and map state, shared by the processor tests (pickled by
value: Spark's Python workers cannot import the tests' modules)."""

from __future__ import annotations

import sys

import pandas as pd
from pyspark import cloudpickle
from pyspark.sql.streaming import StatefulProcessor


class CountingProcessor(StatefulProcessor):
    """Value, list and map state per key: the row count, the values seen, the count of each value."""

    def init(self, handle) -> None:
        self.count = handle.getValueState("count", "n long")
        self.seen = handle.getListState("seen", "v long")
        self.per_value = handle.getMapState("per_value", "v long", "n long")

    def count_rows(self, frame: pd.DataFrame) -> int:
        """Fold a key's rows into its three states; the key's row count so far."""
        n = (self.count.get() or (0,))[0] + len(frame)
        self.count.update((n,))
        for v in frame["v"]:
            self.seen.appendValue((int(v),))
            before = self.per_value.getValue((int(v),))
            self.per_value.updateValue((int(v),), ((before[0] if before else 0) + 1,))
        return n

    def handleInputRows(self, key, rows, timerValues):
        yield pd.DataFrame({"k": [key[0]], "n": [self.count_rows(pd.concat(list(rows)))]})

    def close(self) -> None:
        pass


cloudpickle.register_pickle_by_value(sys.modules[__name__])
