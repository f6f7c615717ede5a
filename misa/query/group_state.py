"""``applyInPandasWithState`` of Spark's analyzed plan (a ``FlatMapGroupsInPandasWithState`` node) as misa's
:class:`~misa.operators.group_state.GroupStateOperator`.

The node holds the user's function as Spark's Python UDF (its pickled command, which Spark's workers unpickle): misa
unpickles the same bytes on the driver. Its grouping columns must be columns of its input (what
``df.groupBy("k")`` makes); the rows of its input are misa's source; the event time is the input's column a
``withWatermark`` marked (Spark gives the function the watermark when there is one, and drops late rows and times
groups out by it under ``EventTimeTimeout``).
"""

from __future__ import annotations

from typing import Any, Callable

from pyspark import SparkContext
from pyspark.serializers import CloudPickleSerializer
from pyspark.sql import types as T

from misa.operators.group_state import group_state_operator
from misa.operators.group_state_values import unstored_fields
from misa.operators.pandas_conversion import PandasConversion
from misa.operators.schema import KEY_TYPES
from misa.query.plan import PlanNode, python_list
from misa.query.translation import OutputColumn, Translation, refused
from misa.query.watermarks import event_time_column, watermarked


def translate_group_state(node: PlanNode, watermark_policy: str) -> Translation:
    """A ``FlatMapGroupsInPandasWithState`` node (``watermark_policy``: spark.sql.streaming.multipleWatermarkPolicy)."""
    child = _input(node)
    marked = event_time_column(node, child.output)
    timed = watermarked(node, child, marked, watermark_policy)
    if timed.inputs is not None:
        raise refused(
            node,
            "its input is a union of watermarked streams",
            "applyInPandasWithState over one stream with one withWatermark",
        )
    columns = {a.expr_id: a.name for a in child.output}
    grouping = node.fields["grouping"]
    computed = [a.name for a in grouping if a.expr_id not in columns]
    if computed:
        raise refused(
            node,
            f"it groups by {computed}, computed from its input",
            "the key as a column first (withColumn), then groupBy(column).applyInPandasWithState(...)",
        )
    unkeyed = [f"{a.name} {a.dtype.simpleString()}" for a in grouping if not isinstance(a.dtype, KEY_TYPES)]
    if unkeyed:
        raise refused(
            node,
            f"it groups by {unkeyed}: misa keys applyInPandasWithState's groups by integers, booleans, floats, "
            "doubles, strings, dates and timestamps only (not by a struct, an array, a decimal, binary or a map)",
            "groupBy of columns of those types (a struct's fields as columns of their own, a decimal or binary "
            "cast to a string) before applyInPandasWithState",
        )
    arguments = [e.attr.name if e.attr is not None else e.sql for e in node.fields["arguments"]]
    if arguments != [a.name for a in child.output]:
        raise refused(
            node,
            f"its function reads {arguments}, not its input's columns {[a.name for a in child.output]}",
            "df.groupBy(columns).applyInPandasWithState(...) on the DataFrame whose columns the function reads",
        )
    state_schema: T.StructType = node.fields["state"]
    unstored = unstored_fields(state_schema)
    if unstored:
        raise refused(
            node,
            f"its state has fields {[f.simpleString() for f in unstored]}, which misa does not store as Spark does",
            "state fields of numbers, strings, booleans, binaries, decimals, dates, timestamps and day-time "
            "intervals, and structs of them (Spark 4.3's Python worker fails a query whose state has an array or a "
            "map at its first batch: KeyError 'elementType' or 'keyType'; an array as a string, for example JSON)",
        )
    output_schema = T.StructType([T.StructField(a.name, a.dtype) for a in node.output])
    operator = group_state_operator(
        _function(node),
        [columns[a.expr_id] for a in grouping],
        [a.name for a in child.output],
        output_schema,
        state_schema,
        node.fields["timeout"],
        marked.name if marked is not None else None,
        timed.delay,
        _conversion(),
    )
    return Translation(timed.source, operator, [OutputColumn(a.name, "column", a.name) for a in node.output])


def _input(node: PlanNode) -> PlanNode:
    """The node's input rows: below the projection ``groupBy`` adds (the grouping columns again, ahead of the
    DataFrame's own), if there is one."""
    child = node.children[0]
    if child.kind == "Project" and all(e.attr is not None for e in child.fields["list"]):
        below = child.children[0]
        if {a.expr_id for a in child.output} == {a.expr_id for a in below.output}:
            return below
    return child


def _function(node: PlanNode) -> Callable[..., Any]:
    """The user's function: the pickled command of the node's Python UDF (``(func, returnType)``), unpickled."""
    command = _command_bytes(node.jvm.functionExpr().func().command())
    try:
        loaded = CloudPickleSerializer().loads(command)
    except Exception as error:  # noqa: BLE001 - a broadcast command (over 1 MB pickled), a missing module, ...
        raise refused(
            node,
            f"misa cannot unpickle its function on the driver ({type(error).__name__}: {str(error)[:200]})",
            "a function importable on the driver, under spark.broadcast's threshold when pickled (1 MB)",
        ) from error
    func = loaded[0] if isinstance(loaded, tuple) else loaded
    if not callable(func):
        raise refused(node, f"its Python UDF holds {type(func).__name__}, not a function", "a Python function")
    return func


def _command_bytes(command: Any) -> bytes:
    """A Python function's command (Scala's ``Seq[Byte]``, or a byte array) as bytes."""
    if isinstance(command, (bytes, bytearray)):
        return bytes(command)
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    readers: list[Callable[[], Any]] = [
        lambda: command.unsafeArray(),  # an ArraySeq of bytes
        lambda: command.toArray(jvm.scala.reflect.ClassTag.Byte()),
    ]
    for read in readers:
        try:
            data = read()
        except Exception:  # noqa: BLE001 - Py4J's error: the next way
            continue
        if isinstance(data, (bytes, bytearray)):
            return bytes(data)
    return bytes(int(b) & 0xFF for b in python_list(command))


def _conversion() -> PandasConversion:
    """Spark's worker's conversions, by the session's settings (its time zone, ...)."""
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    conf = jvm.org.apache.spark.sql.internal.SQLConf.get()

    def flag(key: str, default: str) -> bool:
        return str(conf.getConfString(key, default)).strip().lower() == "true"

    return PandasConversion(
        timezone=str(conf.sessionLocalTimeZone()),
        prefer_int_ext_dtype=flag("spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype", "false"),
        safecheck=flag("spark.sql.execution.pandas.convertToArrowArraySafely", "false"),
        assign_cols_by_name=flag("spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName", "true"),
        int_to_decimal_coercion=flag("spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled", "false"),
    )
