"""A ``GroupState`` value as Spark stores it, and as Spark gives it back to the function in a later call.

Spark's Python worker pickles ``schema.toInternal(value)`` (a timestamp as epoch microseconds in the worker's time
zone, a date as days, a struct as a tuple); the JVM unpickles it (Pyrolite: an int as an Integer, a Long or a
BigInteger by its size, a float as a Double, bytes and bytearray as ``byte[]``, a list as a List, a tuple as an
array, a dict as a Map, a Decimal as a BigDecimal) and converts it for the state schema
(``EvaluatePython.makeFromJava``): a value of another type than its field's is null, an integer is cut to its field's
width, a float rounded to a float field's precision, a decimal rounded half up to its field's scale (beyond its
precision the batch fails), anything in a string field is its JVM ``toString``. A later call gets the stored row as
the JVM pickles it back and pyspark's ``fromInternal`` makes it: a ``Row`` (nested structs ``Row`` too), timestamps
naive local datetimes, binaries ``bytes``.

Measured against Spark 4.3's own path (``PythonSQLUtils.toJVMRow``, the state encoder, ``toPyRow``):
``tests/verify/test_group_state_values_vs_spark.py``. A state schema with an array or a map, at any depth, is not
stored: Spark 4.3's Python worker cannot read such a schema (``KeyError: 'elementType'`` or ``'keyType'`` in
``StructType.fromJson``), so Spark fails the query at its first batch.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

from pyspark.errors import PySparkValueError
from pyspark.sql import Row
from pyspark.sql import types as T

INTEGER_BITS = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64}
MICROS = (T.TimestampType, T.TimestampNTZType, T.DayTimeIntervalType)  # a Long (or an Integer) of microseconds
SCALARS = (T.BooleanType, T.FloatType, T.DoubleType, T.StringType, T.BinaryType, T.DecimalType, T.DateType)
SCALARS += (T.NullType, *MICROS, *INTEGER_BITS)
INT_MAX = (1 << 31) - 1  # an int Pyrolite gives as an Integer (beyond: a Long, then a BigInteger)
UNPICKLED = (type(None), bool, int, float, str, bytes, bytearray, Decimal, list, tuple, dict, set, frozenset)
UNPICKLED += (dt.datetime, dt.date, dt.time, dt.timedelta)  # the types Pyrolite reads (exactly these, not subclasses)


def unstored_fields(schema: T.StructType) -> list[T.StructField]:
    """The fields of a state schema whose values misa does not store as Spark does: an array or a map (Spark's
    worker fails on them), a year-month interval, a variant, a user-defined type, or a struct holding one."""
    return [f for f in schema.fields if not _stores(f.dataType)]


def _stores(dtype: T.DataType) -> bool:
    if isinstance(dtype, T.StructType):
        return all(_stores(f.dataType) for f in dtype.fields)
    return isinstance(dtype, SCALARS)


def stored(value: Any, schema: T.StructType) -> tuple:
    """``value`` (the function's ``state.update`` argument, a ``Row``) as Spark's JVM stores it for ``schema``: the
    internal values (epoch microseconds, days, tuples for structs) after the JVM's conversion."""
    values = tuple(value)
    if len(values) != len(schema.fields):
        raise PySparkValueError(
            f"the state value {values!r} has {len(values)} fields, the state schema {schema.simpleString()} "
            f"{len(schema.fields)}: update the state with a tuple of the schema's fields"
        )
    internal = schema.toInternal(values)
    _check_unpickled(internal, "the state")
    return _from_java(internal, schema, "the state")


def _check_unpickled(value: Any, where: str) -> None:
    """Fail as Spark's JVM fails to unpickle a value of another type than Pyrolite reads (a ``Row`` left in a field
    that is not a struct, a datetime with a time zone, a numpy value inside a list, ...)."""
    if type(value) not in UNPICKLED or (isinstance(value, (dt.datetime, dt.time)) and value.tzinfo is not None):
        raise PySparkValueError(
            f"{where} holds {type(value).__name__} {value!r:.80}, which Spark's JVM cannot unpickle (Spark fails the "
            "batch as well): a plain Python value of the field's type"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            _check_unpickled(key, where)
            _check_unpickled(item, where)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            _check_unpickled(item, where)


def given(value: tuple, schema: T.StructType) -> Row:
    """A stored value as the function's next call gets it (``state.get`` is its tuple)."""
    return schema.fromInternal(value)


def _from_java(value: Any, dtype: T.DataType, where: str) -> Any:
    """``EvaluatePython.makeFromJava(dtype)`` of ``value`` as Pyrolite unpickles it (``where``: the field, for an
    error)."""
    if value is None:
        return None
    if isinstance(value, Decimal) and not value.is_finite():
        value = float(value)  # Pyrolite reads a NaN or infinite Decimal as a Double
    if isinstance(dtype, T.StructType):
        return _struct(value, dtype, where)
    return _scalar(value, dtype, where)


def _struct(value: Any, dtype: T.StructType, where: str) -> tuple | None:
    if not isinstance(value, tuple):  # only a tuple is a Java array (toInternal makes one of a Row, list or dict)
        return None
    if len(value) != len(dtype.fields):
        raise PySparkValueError(
            f"[STRUCT_ARRAY_LENGTH_MISMATCH] {where} {value!r} has {len(value)} values, its struct "
            f"{dtype.simpleString()} {len(dtype.fields)} fields (Spark fails the batch as well)"
        )
    return tuple(_from_java(v, f.dataType, f"field {f.name!r}") for v, f in zip(value, dtype.fields))


def _scalar(value: Any, dtype: T.DataType, where: str) -> Any:
    if isinstance(dtype, T.StringType):
        return _java_string(value, where)
    if isinstance(dtype, T.BooleanType):
        return value if isinstance(value, bool) else None
    if isinstance(dtype, T.NullType):
        return None
    if isinstance(dtype, T.BinaryType):
        if isinstance(value, str):
            return value.encode("utf-8")
        return bytes(value) if isinstance(value, (bytes, bytearray)) else None
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        if not isinstance(value, float):
            return None
        return struct.unpack("f", struct.pack("f", value))[0] if isinstance(dtype, T.FloatType) else value
    if isinstance(dtype, T.DecimalType):
        return _decimal(value, dtype, where) if isinstance(value, Decimal) else None
    if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 63) <= value < 1 << 63:
        return None
    if isinstance(dtype, T.DateType):  # an Integer only
        return value if -INT_MAX - 1 <= value <= INT_MAX else None
    if isinstance(dtype, MICROS):
        return value
    bits = INTEGER_BITS[type(dtype)]
    return (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))  # Java's narrowing of a long


def _decimal(value: Decimal, dtype: T.DecimalType, where: str) -> Decimal:
    """Spark's ``Decimal(value, precision, scale)``: rounded half up to the scale; beyond the precision, an error."""
    with localcontext() as exact:
        exact.prec = len(value.as_tuple().digits) + abs(int(value.as_tuple().exponent)) + dtype.scale + 2
        rounded = value.quantize(Decimal(1).scaleb(-dtype.scale), rounding=ROUND_HALF_UP)
    if len(rounded.as_tuple().digits) > dtype.precision and rounded != 0:
        raise PySparkValueError(
            f"[NUMERIC_VALUE_OUT_OF_RANGE] {where}: {value} rounded half up to {rounded} cannot be represented as "
            f"Decimal({dtype.precision}, {dtype.scale}) (Spark fails the batch as well): a wider decimal type"
        )
    return rounded.copy_abs() if rounded == 0 else rounded  # a BigDecimal has no negative zero


def _java_string(value: Any, where: str) -> str:
    """The JVM's ``toString`` of what Pyrolite makes of ``value``; an object whose ``toString`` is its identity hash
    or a ``HashMap``'s order is refused, naming the fix."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join("null" if e is None else _java_string(e, where) for e in value) + "]"
    raise PySparkValueError(
        f"{where} is a string field given {type(value).__name__} {value!r:.80}: Spark stores the JVM's toString of "
        "what it unpickles (an identity hash or a HashMap's order), which misa cannot reproduce: update the state "
        "with str(value)"
    )


def java_double(value: float) -> str:
    """Java's ``Double.toString``: the shortest digits that read back as ``value`` (Python's ``repr``'s), plain
    between 10^-3 and 10^7, else as ``d.dddE±n``; at least one digit after the point."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + int(exponent)  # the decimal point's place after the first digit of text
    if 1e-3 <= abs(value) < 1e7:
        whole = text[:point].ljust(point, "0") if point > 0 else "0"
        fraction = ("0" * -point + text if point < 0 else text[point:]) or "0"
        return f"{'-' if sign else ''}{whole}.{fraction}"
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{point - 1}"
