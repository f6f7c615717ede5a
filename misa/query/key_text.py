"""Keys misa's codec does not hold (structs, arrays, decimals, binary) as a text Spark computes, and back.

Spark groups, joins and deduplicates by such keys with its own equality: structs and arrays compare field by field
and element by element (a null field equal to a null field), floating values inside them normalized first (its
``NormalizeFloatingNumbers``: -0.0 is 0.0, every NaN one NaN), a decimal by its value at the column's scale. misa
keys its state by strings (:class:`~misa.state.codec.KeyCodec`), so Spark computes in misa's source one text per
such key that is equal exactly where Spark's keys are (:func:`key_text`): a null key stays null; a decimal is its
text at its scale; binary is its base64; a struct or array is the JSON of its canonical form (fields by position,
floating values normalized and as doubles, decimals as text, binary as base64, timestamps and dates as
microseconds and days since the epoch, so that no session time zone or format enters the key). An aggregation's
output carries the key back with its exact type (:func:`decode_keys`): Spark's normalized value, as Spark outputs
its grouping key.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

COMPOSITE = (T.StructType, T.ArrayType, T.DecimalType, T.BinaryType)  # the key types misa keys by their text
JSON_OPTIONS = {"ignoreNullFields": "true"}  # a null field is left out, whatever the session's default
EPOCH_NTZ = "1970-01-01 00:00:00"


def key_text(column: Column, dtype: T.DataType) -> Column:
    """The text misa keys ``column`` (of a type in :data:`COMPOSITE`) by: equal where Spark's keys are equal, null
    where the key is null."""
    if isinstance(dtype, (T.StructType, T.ArrayType)):
        canonical = F.struct(_canonical(column, dtype).alias("v"))
        return F.when(column.isNull(), F.lit(None).cast("string")).otherwise(F.to_json(canonical, JSON_OPTIONS))
    return _canonical(column, dtype)


def _canonical(column: Column, dtype: T.DataType) -> Column:
    """``column`` in the form its key text is made of (:func:`key_text`)."""
    if isinstance(dtype, T.StructType):
        fields = [_canonical(column.getField(f.name), f.dataType).alias(str(i)) for i, f in enumerate(dtype.fields)]
        return F.when(column.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    if isinstance(dtype, T.ArrayType):
        return F.transform(column, lambda element: _canonical(element, dtype.elementType))
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        value = column.cast("double")
        return F.when(F.isnan(value), F.lit(float("nan"))).when(value == 0.0, F.lit(0.0)).otherwise(value)
    if isinstance(dtype, T.DecimalType):
        return column.cast("string")
    if isinstance(dtype, T.BinaryType):
        return F.base64(column)
    if isinstance(dtype, T.TimestampNTZType):
        return F.timestamp_diff("MICROSECOND", F.lit(EPOCH_NTZ).cast("timestamp_ntz"), column)
    if isinstance(dtype, T.TimestampType):
        return F.unix_micros(column)
    if isinstance(dtype, T.DateType):
        return F.unix_date(column)
    return column  # integers, booleans, strings: their JSON is their value


def decode_keys(texts: pa.Array | pa.ChunkedArray, dtype: pa.DataType) -> pa.Array:
    """The keys of Arrow type ``dtype`` whose texts :func:`key_text` made (nulls stay null)."""
    nested = pa.types.is_struct(dtype) or pa.types.is_list(dtype) or pa.types.is_large_list(dtype)
    values = [
        None if text is None else _value(json.loads(text)["v"] if nested else text, dtype) for text in texts.to_pylist()
    ]
    return pa.array(values, dtype)


def _value(value: Any, dtype: pa.DataType) -> Any:
    """A canonical form's value (:func:`_canonical`, read from JSON) as the Python value Arrow makes ``dtype`` of."""
    if value is None:
        return None
    if pa.types.is_struct(dtype):
        return tuple(_value(value.get(str(i)), dtype.field(i).type) for i in range(dtype.num_fields))
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [_value(element, dtype.value_type) for element in value]
    if pa.types.is_floating(dtype):
        return float(value)
    if pa.types.is_decimal(dtype):
        return Decimal(value)
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return base64.b64decode(value)
    return value  # integers, booleans, strings; timestamps and dates as their microseconds and days
