"""``dropDuplicates`` and ``dropDuplicatesWithinWatermark`` of Spark's analyzed plan as misa's
:class:`~misa.operators.dedup.Deduplicate`.

As Spark's deduplication, misa's judges rows by the event-time column of its input (the column a ``withWatermark``
marked, renamed or not; :mod:`misa.query.watermarks`): a row at or before the watermark is late and dropped, whether
the event time is one of the keys (then keys are evicted by it) or not (then keys are kept for good).
"""

from __future__ import annotations

from pyspark.sql import types as T

from misa.operators.dedup import Deduplicate
from misa.query.group_keys import added_column, dedup_key_columns, input_column
from misa.query.plan import Attr, PlanNode
from misa.query.translation import OutputColumn, Translation, refused
from misa.query.watermarks import event_time_column, watermarked


def translate_deduplication(node: PlanNode, watermark_policy: str) -> Translation:
    """A ``Deduplicate`` or ``DeduplicateWithinWatermark`` node (``watermark_policy``: Spark's
    spark.sql.streaming.multipleWatermarkPolicy)."""
    marked = event_time_column(node, node.output)  # Spark judges the rows by it, a key or not
    timed = watermarked(node, node.children[0], marked, watermark_policy)
    within = node.kind == "DeduplicateWithinWatermark"
    if within and marked is None:
        raise refused(node, "it has no withWatermark", "withWatermark(...) before dropDuplicatesWithinWatermark")
    keys = node.fields["keys"]
    time_key = marked is not None and any(k.expr_id == marked.expr_id for k in keys)
    in_key = marked.expr_id if time_key and marked is not None and not within else None  # stored behind the keys
    translation = Translation(timed.source, None, [OutputColumn(a.name, "column", a.name) for a in node.output])
    event_time = marked.name if marked is not None else None
    if marked is not None and isinstance(marked.dtype, T.StructType):  # a window from an aggregation below
        if within:
            raise refused(
                node,
                f"its event time {marked.name!r} is the window of an aggregation below, which Spark's "
                "dropDuplicatesWithinWatermark reads as a timestamp (its keys' expiries are not the window's)",
                "dropDuplicates(cols) over the aggregation's output (Spark judges its rows by the window's end)",
            )
        event_time, in_key = _window_end(node, marked, translation), None  # the window stays a key of its own
    columns = [name for k in keys if k.expr_id != in_key for name in dedup_key_columns(node, k, translation)]
    translation.operator = Deduplicate(
        columns,
        event_time=event_time,
        watermark_delay=timed.delay,
        within_watermark=within,
        event_time_key=time_key,
        watermark_inputs=timed.inputs,
    )
    return translation


def _window_end(node: PlanNode, window: Attr, translation: Translation) -> str:
    """The source column of the end of ``window``, the event time of an aggregation's output below the deduplication
    (Spark judges and evicts its rows by the window's end, ``WatermarkSupport.watermarkExpression``)."""
    return added_column(translation, input_column(node, window).getField("end"))
