"""Whether the next batch's input has arrived when a batch ends: it decides if Spark would run a batch without data.

Spark runs a no-data batch (which evicts state with the new watermark and, in append mode, emits what
closed) only when its trigger finds no new input; with input waiting (a backlog, a busy source) the next
data batch follows at once and judges late rows by the older watermark (:mod:`misa.operators.watermark`).
A foreachBatch query has no stateful operator, so Spark never runs a no-data batch for misa: at the end of
each batch the runtime asks an :class:`Arrivals` whether input waits and, if none does, runs the operator's
``no_data_batch`` itself.

A streaming DataFrame read from one file source (read once, or several times as the two sides of a self-join
read it) is watched without being asked (:func:`arrivals_of`). For other sources (Kafka, the rate source,
several sources) the runtime cannot tell and takes no input as waiting, the answer Spark gives when input
arrives slower than the trigger; pass ``arrivals`` to ``StatefulJob`` to tell it otherwise.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from misa.runtime.next_input import FileSourcePeek

log = logging.getLogger(__name__)
FILE_FORMATS = ("json", "csv", "parquet", "orc", "text", "avro", "xml")


class Arrivals(Protocol):
    """Tells whether a source's next input has arrived."""

    def waiting(self) -> bool:
        """Whether input no batch has read yet has arrived."""


def arrivals_of(stream: DataFrame, spark_checkpoint: str) -> FileSourcePeek | None:
    """A watch on ``stream``'s source when it reads one file source (None otherwise), following Spark's source log
    in ``spark_checkpoint`` (where Spark writes its checkpoint)."""
    leaves = _plan_leaves(stream._jdf.queryExecution().analyzed())
    if any(leaf.nodeName() != "StreamingRelation" for leaf in leaves):
        return None
    sources = {(str(leaf.dataSource().className()), str(leaf.dataSource().options())) for leaf in leaves}
    if len(sources) != 1:
        return None
    source = leaves[0].dataSource()
    fmt = str(source.className()).lower()
    options = _scala_map(source.options())
    path = options.get("path")
    if fmt not in FILE_FORMATS or not path:
        return None
    limit = options.get("maxFilesPerTrigger") or options.get("maxfilespertrigger")
    session, schema = stream.sparkSession, T._parse_datatype_json_string(str(leaves[0].schema().json()))
    reader_options = {k: v for k, v in options.items() if k != "path"}

    def read(files: list[str]) -> DataFrame:
        return session.read.format(fmt).schema(schema).options(**reader_options).load(files)

    return FileSourcePeek(path, spark_checkpoint, read, int(limit) if limit else None)


def _plan_leaves(plan: Any) -> list[Any]:
    leaves, stack = [], [plan]
    while stack:
        node = stack.pop()
        children = node.children()
        if children.isEmpty():
            leaves.append(node)
            continue
        iterator = children.iterator()
        while iterator.hasNext():
            stack.append(iterator.next())
    return leaves


def _scala_map(options: Any) -> dict[str, str]:
    out, iterator = {}, options.iterator()
    while iterator.hasNext():
        pair = iterator.next()
        out[str(pair._1())] = str(pair._2())
    return out
