"""An operator resolved against its input's schema at start (before the query runs), with Spark-like messages.

Each operator's ``signature`` uses these to check the columns it reads and their types, and to
name them with their types in the signature stored with each version
(:mod:`misa.runtime.compat`).
"""

from __future__ import annotations

import base64
import difflib
from typing import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from misa.config_forms import parse_seconds
from misa.exceptions import AnalysisError

INTEGERS = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
KEY_TYPES = (*INTEGERS, T.BooleanType, T.FloatType, T.DoubleType, T.DateType, *(T.TimestampType, T.TimestampNTZType))
KEY_TYPES += (T.StringType,)
RECORD_TYPES = (*INTEGERS, T.StringType)  # columns kept in state values (misa.state.record_codec)
TIMESTAMPS = (T.TimestampType, T.TimestampNTZType)


def column_type(schema: T.StructType, column: str, used_by: str) -> T.DataType:
    """The type of ``column`` in ``schema``; [UNRESOLVED_COLUMN] naming the available columns when it is missing."""
    types = {f.name: f.dataType for f in schema.fields}
    if column not in types:
        close = difflib.get_close_matches(column, list(types), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise AnalysisError(
            f'[UNRESOLVED_COLUMN] column "{column}" used by {used_by} does not exist; available columns: '
            f"{', '.join(types) or '(none)'}.{hint} Fix the name, or produce the column in the upstream."
        )
    return types[column]


def typed(column: str, dtype: T.DataType) -> str:
    """``column: type`` as the signature names a column."""
    return f"{column}: {dtype.simpleString()}"


def column_of(schema: T.StructType, column: str, used_by: str, allowed: tuple[type[T.DataType], ...], role: str) -> str:
    """``column: type`` of a column that must have one of the ``allowed`` types (as ``role``, e.g. a state key)."""
    dtype = column_type(schema, column, used_by)
    if not isinstance(dtype, allowed):
        names = ", ".join(t().simpleString() for t in allowed)
        raise AnalysisError(
            f'[UNSUPPORTED_TYPE] column "{column}" of type {dtype.simpleString()} used by {used_by} cannot be '
            f"{role}; it may be of type {names}. Cast it in the upstream (for example a decimal to double or "
            f"string), or use other columns."
        )
    return typed(column, dtype)


def key_columns(schema: T.StructType, columns: Sequence[str], used_by: str) -> list[str]:
    """``column: type`` of each group (key) column; each must exist and have a type keys can hold."""
    return [column_of(schema, c, used_by, KEY_TYPES, "a state key") for c in columns]


def event_time(schema: T.StructType, column: str, used_by: str) -> None:
    """Refuse an event-time column that is missing or not a timestamp."""
    column_of(schema, column, used_by, TIMESTAMPS, "an event time")


def struct_of(schema: T.StructType, column: str, used_by: str) -> T.StructType:
    """The fields of a struct column."""
    dtype = column_type(schema, column, used_by)
    if not isinstance(dtype, T.StructType):
        raise AnalysisError(
            f'[UNSUPPORTED_TYPE] column "{column}" of type {dtype.simpleString()} used by {used_by} must be a struct'
        )
    return dtype


def duration(text: str | None) -> str | None:
    """A duration as the signature shows it ("10 seconds" and "10s" are both "10s"); None stays None."""
    return f"{parse_seconds(text):g}s" if text else None


def schema_text(schema: pa.Schema) -> str:
    """An Arrow schema as text for a version's metadata (:func:`schema_from_text` reads it back)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def nullable(dtype: T.DataType) -> T.DataType:
    """``dtype`` with every field, element and value nullable: a row packed as a struct may be null (a join's side
    in the other side's rows, a chain's carried rows), and Arrow refuses a null struct whose fields may not be
    (Kafka's ``partition`` and ``offset``, a literal)."""
    if isinstance(dtype, T.StructType):
        return T.StructType([T.StructField(f.name, nullable(f.dataType), True, f.metadata) for f in dtype.fields])
    if isinstance(dtype, T.ArrayType):
        return T.ArrayType(nullable(dtype.elementType), True)
    if isinstance(dtype, T.MapType):
        return T.MapType(dtype.keyType, nullable(dtype.valueType), True)
    return dtype


def nullable_fields(frame: DataFrame) -> DataFrame:
    """``frame`` with every field, element and value inside its columns nullable: PySpark's Arrow conversion fails
    on a null struct whose fields Spark types non-nullable (a batch's deltas unioned with the row of its latest event
    time, whose aggregates are null: approx_top_k's state struct, vector_sum's, a max_by of a struct)."""
    wanted = {f.name: (f.dataType, nullable(f.dataType)) for f in frame.schema.fields}
    casts = {name: frame[name].cast(new) for name, (old, new) in wanted.items() if new != old}
    return frame.withColumns(casts) if casts else frame
