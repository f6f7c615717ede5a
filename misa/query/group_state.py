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
from misa.query.group_keys import added_column, check_key_type, input_column
from misa.query.key_text import COMPOSITE, key_text
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
    for a in grouping:
        check_key_type(node, a.name, a.dtype)
        if isinstance(a.dtype, COMPOSITE) and _holds_floats(a.dtype):
            raise refused(
                node,
                f"it groups by {a.name} {a.dtype.simpleString()}, a key holding floating values: Spark's "
                "applyInPandasWithState groups a -0.0 with a 0.0 within a batch but keys its state by the bits of the "
                "group's first key, so a -0.0 and a 0.0 in different batches are two groups, which misa's key text "
                "(-0.0 is 0.0) cannot follow",
                "the floating fields rounded or cast to a decimal or a string in the key (withColumn), then "
                "groupBy(key).applyInPandasWithState(...)",
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
    translation = Translation(timed.source, None, [OutputColumn(a.name, "column", a.name) for a in node.output])
    key_columns = [columns[a.expr_id] for a in grouping]
    # a struct, an array, a decimal or binary key: the state keyed by its text, the function given the key itself
    state_keys = [
        added_column(translation, key_text(input_column(node, a), a.dtype)) if isinstance(a.dtype, COMPOSITE) else name
        for a, name in zip(grouping, key_columns)
    ]
    translation.operator = group_state_operator(
        _function(node),
        state_keys,
        [a.name for a in child.output],
        output_schema,
        state_schema,
        node.fields["timeout"],
        marked.name if marked is not None else None,
        timed.delay,
        _conversion(),
        key_columns if state_keys != key_columns else None,
    )
    return translation


def _holds_floats(dtype: T.DataType) -> bool:
    """Whether a struct or array type holds a float or double, at any depth."""
    if isinstance(dtype, T.StructType):
        return any(_holds_floats(f.dataType) for f in dtype.fields)
    if isinstance(dtype, T.ArrayType):
        return _holds_floats(dtype.elementType)
    return isinstance(dtype, (T.FloatType, T.DoubleType))


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
