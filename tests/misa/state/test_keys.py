"""The key space: kinds that share a store never collide, and range deletes of windows never reach lookups."""

import pyarrow as pa

from misa.state.codec import KeyCodec
from misa.state.keys import LOOKUP, RIGHT_ROW, SIDE_ROW, WAITING_LEFT, lookup_prefix, window_prefix

YEAR_2100_US = 4_102_444_800 * 1_000_000


def test_one_byte_prefixes_are_distinct_and_none_is_a_prefix_of_another():
    prefixes = [SIDE_ROW, RIGHT_ROW, WAITING_LEFT, LOOKUP]
    assert len(set(prefixes)) == len(prefixes)
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


def test_lookup_prefixes_of_two_columns_do_not_overlap():
    """The column name ends at a 0x00 byte, so ``ad`` and ``ad_id`` keys are told apart."""
    assert not (lookup_prefix("ad_id") + b"1").startswith(lookup_prefix("ad"))
