"""The state codec: aggregate states (exact int64 values, Spark's overflow and NaN order, whatever the fold order),
key layouts (KeyCodec; the key space and every key type's round trip: test_keys.py) and its small helpers."""

from __future__ import annotations

import math
import struct

import numpy as np
import pyarrow as pa
import pytest

from misa.exceptions import AggregateOverflowError
from misa.state.codec import AggStates, Fold, KeyCodec, distinct_keys, is_key_type, latest_per_key
from misa.state.keys import window_prefix
from misa.state.moment_folds import MOMENTS

BIG = 2**53 + 1  # the first integer a double cannot hold
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


def int_states(values: list[int], op: str, ansi: bool = False) -> tuple[AggStates, np.ndarray]:
    """One integer aggregate over ``values``: one state row per value."""
    aggs = AggStates((Fold("v", op, floating=False),), ansi)
    return aggs, np.array([[v, 1] for v in values], np.int64)


def float_states(values: list[float], op: str) -> tuple[AggStates, np.ndarray]:
    """One floating aggregate over ``values``: one state row per value."""
    aggs = AggStates((Fold("v", op, floating=True),))
    cells = np.array(values, np.float64).view(np.int64)
    return aggs, np.column_stack([cells, np.ones(len(values), np.int64)])


def fold_all(aggs: AggStates, states: np.ndarray) -> np.ndarray:
    """``states`` folded one row at a time, as batches merge them into the stored state."""
    acc = aggs.identity(1)
    for row in states:
        acc = aggs.merge(acc, row[None, :])
    return acc


@pytest.mark.parametrize("op,expected", [("sum", 2 * BIG + 1), ("min", 1), ("max", BIG)])
def test_integers_stay_exact_past_2_to_the_53(op, expected):
    aggs, states = int_states([BIG, 1, BIG], op)
    for folded in (aggs.reduce(states, np.array([0])), fold_all(aggs, states)):
        assert aggs.value(folded, 0).tolist() == [expected] and aggs.count(folded, 0).tolist() == [3]


def test_integer_sums_wrap_around_as_sparks_do_without_ansi():
    aggs, states = int_states([LONG_MAX, 1, LONG_MAX, 5], "sum")
    wrapped = (LONG_MAX + 1 + LONG_MAX + 5 + 2**63) % 2**64 - 2**63
    assert aggs.value(fold_all(aggs, states), 0).tolist() == [wrapped]
    assert aggs.value(aggs.reduce(states, np.array([0])), 0).tolist() == [wrapped]


@pytest.mark.parametrize("values", [[LONG_MAX, 1], [LONG_MIN, -1], [2**62, 2**62], [LONG_MIN, LONG_MIN]])
def test_integer_sums_past_the_long_range_raise_under_ansi(values):
    aggs, states = int_states(values, "sum", ansi=True)
    with pytest.raises(AggregateOverflowError, match=r"ARITHMETIC_OVERFLOW.*sum v.*spark.sql.ansi.enabled"):
        aggs.merge(states[:1], states[1:])
    with pytest.raises(AggregateOverflowError):
        aggs.reduce(states, np.array([0]))


def test_integer_sums_at_the_long_range_bounds_do_not_raise_under_ansi():
    aggs, states = int_states([LONG_MAX, -1, 1, LONG_MIN, LONG_MAX], "sum", ansi=True)
    assert aggs.value(aggs.reduce(states, np.array([0, 3])), 0).tolist() == [LONG_MAX, -1]


@pytest.mark.parametrize(
    "values,op,expected",
    [
        ([np.nan, 3.0, 1.0], "min", 1.0),  # NaN ranks above every double
        ([3.0, np.nan, 1.0], "min", 1.0),
        ([np.nan, np.nan], "min", np.nan),
        ([np.inf, np.nan], "min", np.inf),
        ([1.0, np.nan, 3.0], "max", np.nan),
        ([-np.inf, -np.inf], "max", -np.inf),
        ([np.nan, -np.inf], "max", np.nan),
    ],
)
def test_nan_is_ordered_as_spark_orders_it_in_every_split(values, op, expected):
    aggs, states = float_states(values, op)
    splits = [np.array([0]), *[np.array([0, k]) for k in range(1, len(values))]]
    for starts in splits:  # each split folded per part, then the parts merged
        parts = aggs.reduce(states, starts)
        got = aggs.value(fold_all(aggs, parts), 0)[0]
        assert got == expected or (math.isnan(got) and math.isnan(expected)), (starts, got)


@pytest.mark.slow  # fast, but the default suite takes one new case per change; the sliding differential cases run it
def test_central_moments_merge_to_the_variance_whatever_the_split_and_equal_values_keep_m2_zero():
    aggs = AggStates((Fold("s", "sum", False), Fold("var", MOMENTS, True)))
    x = np.random.default_rng(0).normal(1e6, 3, 40)
    ones, zeros = np.ones(40, np.int64), np.zeros(40, np.int64)
    states = np.column_stack([ones, ones, x.view(np.int64), ones, zeros])  # per row: sum 1; mean x, count 1, m2 0
    for starts in (np.array([0]), np.array([0, 7, 8, 30])):  # each split folded per part, then the parts merged
        merged = fold_all(aggs, aggs.reduce(states, starts))
        assert aggs.count(merged, 1).tolist() == [40] and aggs.value(merged, 0).tolist() == [40]
        assert aggs.moments(merged, 1)[0, 0] / 39 == pytest.approx(np.var(x, ddof=1), rel=1e-9)
        assert aggs.value(merged, 1)[0] == pytest.approx(x.mean(), rel=1e-15)
    same = np.array([[np.array(0.01).view(np.int64), n, 0] for n in (3, 1, 2)], np.int64)
    single = AggStates((Fold("var", MOMENTS, True),))
    assert single.moments(fold_all(single, same), 0)[:, 0].tolist() == [0.0]
    assert single.value(single.reduce(same, np.array([0])), 0).tolist() == [0.01]


def test_states_round_trip_and_absent_rows_are_identities():
    aggs = AggStates((Fold("s", "sum", False), Fold("lo", "min", True), Fold("hi", "max", False)))
    states = np.array([[BIG, 2, np.array(-0.5).view(np.int64), 1, LONG_MIN, 3]], np.int64)
    decoded = aggs.decode([aggs.encode(states)[0], None])
    assert decoded[0].tolist() == states[0].tolist()
    assert aggs.merge(decoded[1:], states).tolist() == states.tolist()  # an absent row folds to nothing
    assert [aggs.count(decoded, i).tolist()[1] for i in range(3)] == [0, 0, 0]


# ------------------------------------------------------------------------------------ key layouts
def test_a_windowed_key_of_fixed_columns_is_the_window_end_then_a_null_flag_and_8_bytes_per_column():
    codec = KeyCodec([pa.field("a", pa.int64()), pa.field("b", pa.bool_())], windowed=True)
    keys = codec.encode(np.array([10_000_000, 20]), [pa.array([-1, None]), pa.array([True, None])])
    assert keys == [
        struct.pack(">Q", 10_000_000) + b"\x00" + struct.pack(">q", -1) + b"\x00" + struct.pack(">q", 1),
        struct.pack(">Q", 20) + b"\x01" + bytes(8) + b"\x01" + bytes(8),
    ]
    assert keys[0].startswith(window_prefix(10_000_000)) and codec.fixed


def test_a_key_with_strings_is_a_null_flag_then_a_length_and_utf8_and_a_null_is_one_byte():
    codec = KeyCodec([pa.field("s", pa.string()), pa.field("n", pa.int32())], windowed=False)
    keys = codec.encode(None, [pa.array(["hé", None]), pa.array([None, 7], pa.int32())])
    assert keys == [b"\x00" + struct.pack(">I", 3) + "hé".encode() + b"\x01", b"\x01\x00" + struct.pack(">q", 7)]
    ends, (s, n) = codec.decode(keys)
    assert ends is None and s.to_pylist() == ["hé", None] and n.to_pylist() == [None, 7] and not codec.fixed


def test_string_keys_tell_apart_values_one_concatenation_would_join():
    codec = KeyCodec([pa.field("a", pa.string()), pa.field("b", pa.string())], windowed=True)
    keys = codec.encode(np.array([5, 5, 5]), [pa.array(["ab", "a", "a"]), pa.array(["", "b", None])])
    assert len(set(keys)) == 3
    ends, cols = codec.decode(keys)
    assert ends.tolist() == [5, 5, 5] and [c.to_pylist() for c in cols] == [["ab", "a", "a"], ["", "b", None]]


def test_window_keys_sort_by_window_end_first():
    codec = KeyCodec([pa.field("s", pa.string())], windowed=True)
    keys = codec.encode(np.array([2, 1, 256]), [pa.array(["a", "zzz", None])])
    assert sorted(keys) == [keys[1], keys[0], keys[2]]


def test_the_window_end_alone_is_a_key_without_group_columns():
    codec = KeyCodec([], windowed=True)
    assert codec.encode(np.array([1, 2]), []) == [window_prefix(1), window_prefix(2)]
    assert codec.decode([window_prefix(3)])[0].tolist() == [3]


# ---------------------------------------------------------------------------------- state helpers
def test_states_are_stored_as_little_endian_value_and_count_cells():
    aggs = AggStates((Fold("s", "sum", False), Fold("m", "max", True)))
    [value] = aggs.encode(np.array([[-2, 3, np.array(1.5).view(np.int64), 1]], np.int64))
    assert value == struct.pack("<qqdq", -2, 3, 1.5, 1) and aggs.width == 4


def test_identities_are_the_empty_fold_of_each_aggregate():
    folds = [Fold("a", op, floating) for floating in (False, True) for op in ("sum", "min", "max")]
    aggs = AggStates(tuple(folds))
    identity = aggs.identity(2)
    assert identity.shape == (2, 12) and identity[:, 1::2].tolist() == [[0] * 6] * 2
    assert [aggs.value(identity, i)[0].item() for i in range(3)] == [0, LONG_MAX, LONG_MIN]
    sums, mins, maxes = (aggs.value(identity, i)[1] for i in range(3, 6))
    assert sums == 0.0 and math.isnan(mins) and maxes == -math.inf
    assert aggs.reduce(identity, np.array([], np.int64)).shape == (0, 12)


def test_per_key_folds_each_keys_rows_and_gives_its_first_row():
    aggs, states = int_states([5, 1, 7, 2, 3], "sum")
    folded, first = aggs.per_key(states, np.array([1, 0, 1, 2, 0]), 3)
    assert aggs.value(folded, 0).tolist() == [4, 12, 2] and aggs.count(folded, 0).tolist() == [2, 2, 1]
    assert first.tolist() == [1, 0, 3]


def test_distinct_keys_keep_the_first_seen_order_and_latest_per_key_takes_the_max_time():
    keys, rows = distinct_keys([b"b", b"a", b"b", b"c", b"a"])
    assert keys == [b"b", b"a", b"c"] and rows.tolist() == [0, 1, 0, 2, 1]
    assert latest_per_key(rows, 3, np.array([5, -3, 9, 1, -7])).tolist() == [9, -3, 1]
    assert distinct_keys([])[0] == [] and distinct_keys([])[1].tolist() == []


def test_is_key_type_takes_fixed_width_and_string_types_only():
    accepted = [pa.int8(), pa.uint64(), pa.bool_(), pa.date32(), pa.timestamp("ms"), pa.float32(), pa.large_string()]
    refused = [pa.float16(), pa.date64(), pa.binary(), pa.decimal128(5, 1), pa.null(), pa.list_(pa.int8())]
    assert [is_key_type(t) for t in accepted] == [True] * len(accepted)
    assert [is_key_type(t) for t in refused] == [False] * len(refused)


@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_keys_with_strings_decode_per_column_as_the_per_key_decoder_did(windowed, seed):
    from per_key_keys import decode_per_key

    rng = np.random.default_rng(seed)
    n = 300
    columns = [
        pa.array([None if v % 7 == 0 else f"k{v}é" * (v % 4) for v in rng.integers(0, 50, n)], pa.string()),
        pa.array([None if v % 5 == 0 else int(v) for v in rng.integers(-(2**62), 2**62, n)], pa.int64()),
        pa.array([[None, math.nan, 0.0, 1.5, -2.0][v] for v in rng.integers(0, 5, n)], pa.float64()),
        pa.array([None if v == 0 else "" for v in rng.integers(0, 3, n)], pa.large_string()),
        pa.array(rng.integers(0, 10**15, n), pa.timestamp("us", "UTC")),
        pa.array([[True, False, None][v] for v in rng.integers(0, 3, n)], pa.bool_()),
        pa.array(rng.integers(0, 30000, n).astype(np.int32), pa.date32()),
    ]
    codec = KeyCodec([pa.field(f"c{i}", c.type) for i, c in enumerate(columns)], windowed=windowed)
    ends_in = rng.integers(0, 2**62, n) if windowed else None
    keys = codec.encode(ends_in, columns)
    ends, decoded = codec.decode(keys)
    expected_ends, expected = decode_per_key(codec, keys)

    def values(cols: list[pa.Array]) -> list[list[str]]:  # NaN equals NaN, -0.0 differs from 0.0
        return [[repr(v) for v in c.to_pylist()] for c in cols]

    assert values(decoded) == values(expected) == values(columns)
    assert [c.type for c in decoded] == [c.type for c in columns]
    assert (ends is None) == (not windowed) and (ends is None or ends.tolist() == expected_ends.tolist())


@pytest.mark.parametrize("op,expected", [("and", 0b0100), ("or", -1), ("xor", 0b0110 ^ 0b1100 ^ -3)])
def test_bitwise_folds_of_sign_extended_integers_merge_to_the_fold_of_every_value(op, expected):
    """bit_and, bit_or and bit_xor: their identity folds to the value itself, and merged one row at a time or as a
    segment the fold is the same (a byte's -3, widened to int64, keeps its bits)."""
    values = [0b0110, 0b1100, -3] if op != "and" else [0b0110, 0b1100, -3 & 0b1111_0111]
    aggs, states = int_states(values, op)
    assert fold_all(aggs, states)[0, 0] == expected
    assert aggs.folds[0].reduce(states[:, 0], np.array([0]), False)[0] == expected
    assert aggs.merge(aggs.identity(1), states[:1])[0, 0] == values[0]
