"""Lists of records packed into state values (RecordCodec): the byte layout, round trips, and misuse."""

from __future__ import annotations

import datetime
import decimal
import math
import struct

import numpy as np
import pyarrow as pa
import pytest

from misa.state.record_codec import RecordCodec, exclusive_cumsum

SCHEMA = pa.schema([("a", pa.int64()), ("s", pa.string()), ("b", pa.int32())])


def table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


def test_exclusive_cumsum_gives_where_each_run_begins():
    assert exclusive_cumsum(np.array([3, 0, 2, 5])).tolist() == [0, 3, 3, 5]
    assert exclusive_cumsum(np.array([7])).tolist() == [0]
    assert exclusive_cumsum(np.array([], np.int64)).tolist() == []


def test_a_value_is_its_count_the_record_lengths_then_the_records_little_endian():
    codec = RecordCodec(SCHEMA)
    [value] = codec.encode(table([(5, "hé", -2), (None, None, 7)]), np.array([2]))
    # a record: the int64 columns (a, b), a null flag per column (a, s, b), the string lengths, the strings
    first = struct.pack("<qq3BI", 5, -2, 0, 0, 0, 3) + "hé".encode()
    second = struct.pack("<qq3BI", 0, 7, 1, 1, 0, 0)
    assert value == struct.pack("<III", 2, len(first), len(second)) + first + second


def test_a_group_without_records_is_a_zero_count():
    codec = RecordCodec(SCHEMA)
    values = codec.encode(table([(1, "x", 1)]), np.array([0, 1, 0]))
    assert values[0] == values[2] == b"\x00\x00\x00\x00" and struct.unpack_from("<I", values[1]) == (1,)
    rows, owner = codec.decode(values)
    assert rows.to_pylist() == [{"a": 1, "s": "x", "b": 1}] and owner.tolist() == [1]


def test_equal_records_give_equal_bytes_wherever_they_are_in_the_batch():
    codec = RecordCodec(SCHEMA)
    rows = table([(1, "x", 2), (3, "long string", None), (1, "x", 2)])
    values = codec.encode(rows, np.array([1, 1, 1]))
    assert values[0] == values[2] != values[1]
    assert codec.encode(rows.slice(2), np.array([1])) == [values[0]]


@pytest.mark.parametrize(
    "types",
    [
        (pa.int8(), pa.large_string(), pa.uint32()),
        (pa.int16(), pa.string(), pa.int64()),
    ],
)
def test_column_types_round_trip_from_sliced_and_chunked_input(types):
    schema = pa.schema([(name, t) for name, t in zip(("a", "s", "b"), types)])
    rows = [(i % 100, None if i % 4 == 0 else "ü" * (i % 5), None if i % 3 == 0 else i) for i in range(40)]
    whole = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema)
    chunked = pa.concat_tables([whole.slice(3, 10), whole.slice(13, 20)])  # offsets into shared buffers
    assert chunked["s"].num_chunks == 2
    codec = RecordCodec(schema)
    counts = np.array([5, 0, 11, 14])
    values = codec.encode(chunked, counts)
    back, owner = codec.decode(values)
    assert back.schema == schema and back.to_pylist() == whole.slice(3, 30).to_pylist()
    assert owner.tolist() == np.repeat(np.arange(4), counts).tolist()


def test_decode_reads_values_in_any_order_and_none_holds_no_record():
    codec = RecordCodec(SCHEMA)
    records = table([(2**63 - 1, "a", -(2**31)), (-(2**63), "b", 2**31 - 1), (3, "c", 3)])
    values = codec.encode(records, np.array([1, 2]))
    rows, owner = codec.decode([None, values[1], None, values[0]])
    assert rows.to_pylist() == [records.to_pylist()[i] for i in (1, 2, 0)] and owner.tolist() == [1, 1, 3]
    for nothing, owners in (codec.decode([None, None]), codec.decode([])):
        assert nothing.num_rows == 0 and nothing.schema == SCHEMA and owners.tolist() == []


def _value(v: object) -> object:
    """A value as compared: floats by their repr (so NaN equals NaN and -0.0 differs from 0.0)."""
    return repr(v) if isinstance(v, float) else v


def test_columns_of_every_type_round_trip_bit_for_bit_behind_a_marker():
    schema = pa.schema(
        [
            ("f", pa.float64()),
            ("g", pa.float32()),
            ("b", pa.bool_()),
            ("d", pa.date32()),
            ("t", pa.timestamp("us", "UTC")),
            ("dec", pa.decimal128(12, 2)),
            ("bin", pa.binary()),
            ("arr", pa.list_(pa.int64())),
            ("st", pa.struct([("a", pa.string()), ("b", pa.int32())])),
        ]
    )
    rows = [
        {
            "f": [math.nan, -0.0, 1.5, None, 2.0**-1074][i % 5],
            "g": None if i % 5 == 0 else i / 4,
            "b": [True, False, None][i % 3],
            "d": datetime.date(2020, 1, 1 + i % 20),
            "t": None
            if i % 6 == 0
            else datetime.datetime(1960, 1, 1, tzinfo=datetime.timezone.utc)
            + datetime.timedelta(microseconds=i * 1_234_567),
            "dec": None if i % 4 == 1 else decimal.Decimal(f"-{i}.{i % 100:02d}"),
            "bin": None if i % 2 else bytes(range(i)),
            "arr": None if i % 5 == 2 else list(range(i % 4)),
            "st": None if i % 6 == 3 else {"a": str(i), "b": i},
        }
        for i in range(30)
    ]
    whole = pa.Table.from_pylist(rows, schema=schema)
    chunked = pa.concat_tables([whole.slice(0, 11), whole.slice(11)])
    codec = RecordCodec(schema, marker=b"\x02")
    values = codec.encode(chunked, np.array([3, 0, 20, 7]))
    assert all(v.startswith(b"\x02") for v in values)
    back, owner = codec.decode([values[2], None, values[0], values[1], values[3]])
    expected = rows[3:23] + rows[:3] + rows[23:]
    assert back.schema == schema and owner.tolist() == [0] * 20 + [2] * 3 + [4] * 7
    assert [{k: _value(v) for k, v in r.items()} for r in back.to_pylist()] == [
        {k: _value(v) for k, v in r.items()} for r in expected
    ]


def test_counts_not_matching_the_rows_are_refused():
    with pytest.raises(ValueError, match="group counts add up to 3, but there are 2 rows"):
        RecordCodec(SCHEMA).encode(table([(1, "a", 1), (2, "b", 2)]), np.array([1, 2]))
