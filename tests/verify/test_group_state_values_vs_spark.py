"""A ``GroupState`` value stored and given back by misa (:mod:`misa.operators.group_state_values`) against Spark's
own path for it: the worker's pickle of ``toInternal``, the JVM's ``PythonSQLUtils.toJVMRow`` (Pyrolite and
``makeFromJava``), the state store's encoder there and back, ``PythonSQLUtils.toPyRow`` and the worker's unpickle."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pytest
from pyspark.serializers import CPickleSerializer
from pyspark.sql import Row
from pyspark.sql import types as T

from misa.operators.group_state_values import given, java_double, stored, unstored_fields

PICKLE = CPickleSerializer()
SCHEMAS = [
    "s string",
    "l bigint, i int, b tinyint, f float, d double, flag boolean",
    "t timestamp, day date, ntz timestamp_ntz, span interval day to second",
    "m decimal(5,2), big decimal(38,10)",
    "bin binary",
    "st struct<x:int,y:string,inner:struct<t:timestamp,d:decimal(4,1)>>",
]


class SparksPath:
    """Spark's path of a state value of ``schema``: the JVM's schema, the state encoder and its two directions."""

    def __init__(self, spark, schema: T.StructType):
        self.schema = schema
        self.utils = spark._jvm.org.apache.spark.sql.api.python.PythonSQLUtils
        self.jschema = spark._jsparkSession.parseDataType(schema.json())
        encoder = spark._jvm.org.apache.spark.sql.catalyst.encoders.ExpressionEncoder.apply(self.jschema)
        encoder = encoder.resolveAndBind(
            getattr(encoder, "resolveAndBind$default$1")(), getattr(encoder, "resolveAndBind$default$2")()
        )
        self.to_row, self.to_internal = encoder.createDeserializer(), encoder.createSerializer()

    def __call__(self, value: tuple) -> Any:
        """What Spark's function gets back after ``state.update(value)``: a Row, or the error's first line."""
        try:
            pickled = bytearray(PICKLE.dumps(self.schema.toInternal(Row(*value))))
            row = self.utils.toJVMRow(pickled, self.jschema, self.to_row)
            kept = self.to_row.apply(self.to_internal.apply(row).copy())  # as the state store keeps it
            return PICKLE.loads(bytes(self.utils.toPyRow(kept)))
        except Exception as error:  # noqa: BLE001 - Spark fails the batch: compared as "an error"
            return ("error", str(error).splitlines()[0][:200])


def misas(schema: T.StructType, value: tuple) -> Any:
    try:
        return given(stored(Row(*value), schema), schema)
    except Exception as error:  # noqa: BLE001
        return ("error", str(error))


def same(spark_result: Any, misa_result: Any) -> bool:
    """Equal rows of the same Python types (a map's entries in any order, NaN equal to NaN), or both an error."""
    if isinstance(spark_result, tuple) and spark_result[:1] == ("error",):
        return isinstance(misa_result, tuple) and misa_result[:1] == ("error",)
    return _canonical(misa_result) == _canonical(spark_result)


def _canonical(value: Any) -> Any:
    """``value`` with its Python types, a dict's entries sorted and NaN as a string."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [_canonical(v) for v in value])
    if isinstance(value, dict):
        return ("dict", sorted((repr(_canonical(k)), _canonical(v)) for k, v in value.items()))
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, repr(value))


REFUSED_IN_A_STRING = ("bytes", "bytearray", "tuple", "dict", "set", "frozenset", "datetime", "date", "timedelta")


CANDIDATES: list[Any] = [
    None, 0, -1, 7, 1 << 31, -(1 << 31) - 1, 1 << 40, 1 << 63, -(1 << 63), 1 << 70, True, False,
    0.0, -0.0, 2.5, 0.1, 1e-5, 123456789.125, 3.4e38, 1e300, float("inf"), float("nan"),
    "", "x", "é", b"", b"ab\xff", bytearray(b"cd"), Decimal("1.005"), Decimal("-0.001"), Decimal("123.456"),
    Decimal("1234.5"), Decimal("1E+2"), Decimal("12345678901234567890.0123456789"), Decimal("NaN"),
    dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), dt.date(2024, 1, 2), dt.timedelta(days=1, microseconds=3),
    [1, 2, None], (1, 2), [1 << 40, 2.5, True], ["a", None], [["a"], []], (["b"],), {"a": 1, "b": None}, {1: 2},
    {"k": 1 << 40}, (1, "a", None), (1, "a", (dt.datetime(2020, 5, 6), Decimal("12.34"))), [1, "a", None],
    {"x": 1, "y": "b", "inner": None}, Row(x=2, y="c", inner=(None, Decimal("0.05"))), (1,), {1, 2},
]  # fmt: skip


def draws(schema: T.StructType, rng: random.Random, count: int) -> list[tuple]:
    """``count`` values of the schema's width, each field one of :data:`CANDIDATES` (of its type or not)."""
    return [tuple(rng.choice(CANDIDATES) for _ in schema.fields) for _ in range(count)]


@pytest.mark.parametrize("ddl", SCHEMAS)
def test_a_state_value_comes_back_as_spark_gives_it_back(spark, ddl):
    schema = T.StructType.fromDDL(ddl)
    assert not unstored_fields(schema)
    rng = random.Random(ddl)
    values = [(c,) * len(schema.fields) for c in CANDIDATES] + draws(schema, rng, 60)
    sparks, differ = SparksPath(spark, schema), []
    for value in values:
        try:
            schema.toInternal(Row(*value))
        except Exception:  # noqa: BLE001 - the worker fails before the JVM sees it, in both engines
            continue
        spark_result, misa_result = sparks(value), misas(schema, value)
        refused = misa_result[:1] == ("error",) and "str(value)" in misa_result[1]
        if refused and not (isinstance(spark_result, tuple) and spark_result[:1] == ("error",)):
            # a JVM object's toString in a string field (an identity hash, a HashMap's order, a Calendar's fields)
            assert misa_result[1].split(" given ")[1].split()[0] in REFUSED_IN_A_STRING, misa_result
        elif not same(spark_result, misa_result):
            differ.append(f"{value!r}: Spark {spark_result!r}, misa {misa_result!r}")
    assert not differ, "\n".join(differ[:10])


def test_doubles_in_a_string_field_read_as_javas_double_to_string(spark):
    """Java 17's ``Double.toString`` (``java_double``) over random doubles of every magnitude."""
    rng = random.Random(5)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-12, 12) for _ in range(150)] + [1e7, 1e-3, 9.999e-4, 100.0]
    sparks = SparksPath(spark, T.StructType.fromDDL("s string"))
    differ = [(v, s) for v in values if (s := sparks((v,)).s) != java_double(v)]
    assert not differ, differ[:5]


def test_an_array_a_map_or_a_year_month_interval_is_not_stored(spark):
    """Spark's worker fails on a state schema with an array or a map (at any depth) at the query's first batch."""
    schema = T.StructType.fromDDL(
        "a interval year to month, b array<bigint>, c bigint, d map<string,int>, e struct<x:array<int>>, "
        "f struct<y:int>"
    )
    assert [f.name for f in unstored_fields(schema)] == ["a", "b", "d", "e"]
