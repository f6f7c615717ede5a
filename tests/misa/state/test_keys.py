"""The key space: kinds that share a store never collide, and range deletes of windows never reach lookups."""

import pyarrow as pa
import pytest

from misa.state.codec import KeyCodec
from misa.state.keys import (
    LOOKUP,
    PANE_RECORD,
    PANE_TIMER,
    RIGHT_ROW,
    SIDE_ROW,
    WAITING_LEFT,
    lookup_prefix,
    window_prefix,
)

YEAR_2100_US = 4_102_444_800 * 1_000_000


def test_kind_prefixes_are_distinct_and_none_is_a_prefix_of_another():
    prefixes = [SIDE_ROW, RIGHT_ROW, WAITING_LEFT, LOOKUP, PANE_RECORD, PANE_TIMER]
    assert len(set(prefixes)) == len(prefixes) == 6
    assert not [(a, b) for a in prefixes for b in prefixes if a != b and b.startswith(a)]


def test_lookup_values_sort_after_every_window_and_group_key_of_their_aggregation():
    """LookupAggregation stores its looked-up values beside its aggregation's keys."""
    lookups = [lookup_prefix(column) + b"ad-1" for column in ("ad_id", "x")]
    windowed = KeyCodec([pa.field("campaign", pa.string())], windowed=True)
    window_keys = windowed.encode([0, 10_000_000, YEAR_2100_US], [pa.array(["a", None, "c"])])
    grouped = KeyCodec([pa.field("campaign", pa.string()), pa.field("n", pa.int64())], windowed=False)
    group_keys = grouped.encode(None, [pa.array(["a", None]), pa.array([None, -1])])
    assert max(window_keys + group_keys) < min(lookups)
    # the range delete of every window closed by the year 2100 stops before the looked-up values
    begin, end = window_prefix(0), window_prefix(YEAR_2100_US + 1)
    assert all(begin <= k < end for k in window_keys) and not [k for k in lookups if begin <= k < end]


def test_pane_keys_sort_between_every_window_or_group_key_and_the_looked_up_values():
    """Sliding windows' pane records and timers (0xFE) meet neither the window and group keys nor the lookups
    (0xFF), and the range delete of closed windows never reaches them."""
    windowed = KeyCodec([pa.field("job", pa.int64())], windowed=True)
    window_keys = windowed.encode([0, YEAR_2100_US], [pa.array([None, 2**63 - 1])])
    group_keys = KeyCodec([pa.field("job", pa.string())], windowed=False).encode(None, [pa.array(["\uffff", None])])
    panes = [PANE_RECORD + group_keys[0], PANE_TIMER + window_prefix(YEAR_2100_US) + group_keys[0]]
    assert max(window_keys + group_keys) < min(panes) and max(panes) < lookup_prefix("")
    assert [p[:2] for p in panes] == [b"\xfep", b"\xfet"]
    begin, end = window_prefix(0), window_prefix(YEAR_2100_US + 1)
    assert not [k for k in panes if begin <= k < end]


def test_lookup_prefixes_of_two_columns_do_not_overlap():
    """The column name ends at a 0x00 byte, so ``ad`` and ``ad_id`` keys are told apart."""
    assert not (lookup_prefix("ad_id") + b"1").startswith(lookup_prefix("ad"))


KEY_COLUMNS = [
    pa.array([1.5, None, -0.0, float("nan"), 0.0], pa.float64()),
    pa.array([1.5, 2.0, None, float("nan"), -0.0], pa.float32()),
    pa.array([1_700_000_000_000_000, None, -5, 0, 1], pa.timestamp("us", tz="UTC")),
    pa.array([1, None, -5, 0, 1], pa.timestamp("us")),
    pa.array([19_000, None, -1, 0, 19_000], pa.date32()),
    pa.array([True, None, False, True, False]),
    pa.array([2**62, None, -(2**63), 0, -1], pa.int64()),
]


@pytest.mark.parametrize("with_string", [False, True])
@pytest.mark.parametrize("windowed", [False, True])
def test_every_key_type_round_trips_with_its_type_and_floats_are_normalized_as_spark_groups_them(windowed, with_string):
    columns = KEY_COLUMNS + ([pa.array(["a", None, "ü", "", "b"])] if with_string else [])
    codec = KeyCodec([pa.field(f"c{i}", c.type) for i, c in enumerate(columns)], windowed=windowed)
    keys = codec.encode([10, 20, 30, 40, 50] if windowed else None, columns)
    ends, back = codec.decode(keys)
    assert [c.type for c in back] == [c.type for c in columns]
    expected = [c.to_pylist() for c in columns]
    expected[0][2] = expected[1][4] = 0.0  # -0.0 is 0.0, as in Spark's grouping
    got = [c.to_pylist() for c in back]
    assert str(got) == str(expected) and str(got[0][2]) == "0.0" and str(got[1][4]) == "0.0"
    assert (ends.tolist() if windowed else ends) == ([10, 20, 30, 40, 50] if windowed else None)


def test_a_double_key_is_one_key_for_zero_and_minus_zero_and_one_for_every_nan():
    codec = KeyCodec([pa.field("d", pa.float64())], windowed=False)
    assert len(set(codec.encode(None, [pa.array([0.0, -0.0, float("nan"), -float("nan")])]))) == 2


@pytest.mark.parametrize(
    "dtype", [pa.decimal128(10, 2), pa.binary(), pa.list_(pa.int64()), pa.struct([("a", pa.int64())])]
)
def test_types_keys_cannot_hold_are_refused(dtype):
    with pytest.raises(TypeError, match="key columns may be integers, booleans, dates, timestamps"):
        KeyCodec([pa.field("g", dtype)], windowed=False)
