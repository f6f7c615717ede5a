"""misa's streaming query planned as Spark plans the user's stateful query.

Spark plans the micro-batches of a stateful query without adaptive execution, but since Spark 4.1 those of a
stateless one (misa's: its sink is ``foreachBatch``) with it. Adaptive execution changes joins and shuffles at run
time (a sort-merge join becomes a broadcast join with a local shuffle read), and so the order of a batch's rows,
which decides the row a deduplication keeps of a key seen twice in a batch. misa's query starts with adaptive
execution off for its streaming part (Spark's own ``spark.sql.adaptive.streaming.stateless.enabled``), as the
stateful query's; what misa computes from each batch afterwards keeps the session's settings.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from pyspark.sql import SparkSession

STATELESS_AQE = "spark.sql.adaptive.streaming.stateless.enabled"


@contextmanager
def planned_as_stateful(spark: SparkSession) -> Iterator[None]:
    """A query started in this block plans its batches as Spark plans a stateful query's (Spark copies the
    session's settings when the query starts; the session's own are restored after)."""
    previous = spark.conf.get(STATELESS_AQE, None)
    spark.conf.set(STATELESS_AQE, "false")
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(STATELESS_AQE)
        else:
            spark.conf.set(STATELESS_AQE, previous)
