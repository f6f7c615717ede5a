"""The read cache: TAC, LRU and Clock eviction, byte capacity, refresh at the batch's end, statistics."""

from __future__ import annotations

import random
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from common.cache_contract import MISSING
from prefetch.cache import ENTRY_OVERHEAD, POLICIES, StateCache
from prefetch.policies import TimestampOrder

V = b"v" * 36  # 1-byte keys + 36-byte values + overhead = 101 bytes per entry
ENTRY = 1 + len(V) + ENTRY_OVERHEAD


def k(i: int) -> bytes:
    return bytes([i])


def cache(entries: int, policy: str = "tac") -> StateCache:
    """A cache with room for ``entries`` entries of (k(i), V)."""
    return StateCache(entries * ENTRY, policy)


def held(c: StateCache, ids: range) -> set[int]:
    return {i for i in ids if c.contains(k(i))}


def fill(c: StateCache, *ids: int) -> None:
    c.fill([k(i) for i in ids], [V] * len(ids), 0)


def test_tac_evicts_the_smallest_timestamps_with_accessed_and_prefetched_entries_mixed():
    c = cache(4)
    c.fill([k(1), k(2)], [V, V], [10, 20])  # read at event times 10 and 20
    c.fill([k(3), k(4)], [V, V], [50, 60], prefetched=True)  # hinted for future times 50 and 60
    c.get_many([k(1)], 30)  # read again at 30: now 2 is the oldest
    c.fill([k(5)], [V], 40)
    assert held(c, range(1, 6)) == {1, 3, 4, 5}
    c.fill([k(6)], [V], 45)  # 1 (30) goes next, the prefetched ones stay
    assert held(c, range(1, 7)) == {3, 4, 5, 6}
    c.get_many([k(3)], 42)  # read early: the read sets its time (50 -> 42)
    c.fill([k(7)], [V], 55)  # 5 (40) goes; 4 (60) is still in the future
    assert held(c, range(1, 8)) == {3, 4, 6, 7}
    c.fill([k(8)], [V], 44)  # 3 (42) goes
    assert held(c, range(1, 9)) == {4, 6, 7, 8}
    c.fill([k(9)], [V], 1)  # older than everything: evicted at once
    assert held(c, range(1, 10)) == {4, 6, 7, 8}
    assert c.stats.evictions == 5 and c.stats.prefetched_entries_unread == 0


def test_tac_keeps_the_largest_timestamps_of_many_entries():
    rng = random.Random(7)
    c = StateCache(50 * (2 + ENTRY_OVERHEAD), "tac")
    keys = [i.to_bytes(2, "big") for i in range(400)]
    stamps = np.array(rng.sample(range(10_000), len(keys)), dtype=np.int64)  # numpy stamps are accepted
    for start in range(0, len(keys), 37):  # in chunks, as prefetch threads fill
        chunk = slice(start, start + 37)
        c.fill(keys[chunk], [b""] * len(keys[chunk]), stamps[chunk])
    newest = sorted(range(len(keys)), key=lambda i: stamps[i])[-50:]
    assert {keys[i] for i in newest} == {key for key in keys if c.contains(key)}


def test_tac_evicts_equal_timestamps_oldest_stamp_first():
    order = TimestampOrder()
    for key in (1, 2, 3, 4):
        order.insert(k(key), 7)  # one event time (e.g. a job without event times stamps 0)
    order.touch(k(1), 7)  # re-stamped with the same time: now the newest of the four
    order.touch(k(3), 9)
    order.renew(k(2), 5)  # a hint never lowers a timestamp, nor re-stamps
    order.insert(k(5), 7)
    assert [order.victim() for _ in range(5)] == [k(2), k(4), k(1), k(5), k(3)]


def test_a_renewed_hint_saves_an_entry_and_a_read_sets_its_time():
    c = cache(3)
    c.fill([k(1), k(2), k(3)], [V, V, V], [10, 20, 30])
    assert c.renew([k(1), k(9)], [100, 100]) == 1  # only 1 is held
    c.fill([k(4)], [V], 40)
    assert held(c, range(1, 5)) == {1, 3, 4}  # 2 (20) went instead of 1 (100)
    c.renew([k(3)], 5)  # a hint never lowers a timestamp
    c.get_many([k(1)], 25)  # a read sets it to the access time (100 -> 25)
    c.fill([k(5)], [V], 50)
    assert held(c, range(1, 6)) == {3, 4, 5}


def test_lru_evicts_the_least_recently_used():
    c = cache(3, "lru")
    fill(c, 1, 2, 3)
    c.get_many([k(1)])
    fill(c, 4)
    assert held(c, range(1, 5)) == {1, 3, 4}  # 2 was least recently used
    c.get_many([k(3)])
    c.renew([k(4)], 0)  # so is a hint
    fill(c, 5)
    assert held(c, range(1, 6)) == {3, 4, 5}
    fill(c, 6, 7)
    assert held(c, range(1, 8)) == {5, 6, 7} and c.stats.evictions == 4


def test_clock_gives_a_used_entry_one_second_chance():
    # Frames 1 2 3, hand at 1, every reference bit set (new entries are set: they enter on a use).
    c = cache(3, "clock")
    fill(c, 1, 2, 3)
    fill(c, 4)  # the hand clears 1, 2, 3 and comes round to 1: evicted
    assert held(c, range(1, 5)) == {2, 3, 4}
    c.get_many([k(4), k(2)])  # bits on 4 and 2; the hand is at 2
    fill(c, 5)  # 2 loses its bit, 3 has none: 3 goes; the hand is at 4
    assert held(c, range(1, 6)) == {2, 4, 5}
    fill(c, 6)  # 4 loses its bit; 2's was cleared by the last sweep: 2 goes
    assert held(c, range(1, 7)) == {4, 5, 6}
    assert len(c) == 3 and c.stats.evictions == 3  # LRU would have taken 1, 3, 4; FIFO 1, 2, 3


def test_refresh_replaces_held_values_and_adds_no_key_the_batch_did_not_read():
    c = cache(3)
    c.fill([k(1), k(2)], [b"a", None], [1, 2])
    changes = {k(1): b"bb", k(2): V, k(3): b"blind"}  # 3 was written without a read: not added
    c.refresh(changes, [])
    assert c._values[k(1)] == b"a"  # queued: the next operation applies it, on its own thread
    assert c.get_many([k(1), k(2), k(3)]) == [b"bb", V, MISSING]
    assert c.bytes_cached == (1 + 2 + ENTRY_OVERHEAD) + ENTRY and len(c) == 2
    c.refresh({k(1): None}, [])  # deleted: a negative entry
    assert c.get_many([k(1)]) == [None] and c.bytes_cached == (1 + ENTRY_OVERHEAD) + ENTRY


def test_refresh_grows_values_within_capacity_by_evicting():
    c = cache(2)
    c.fill([k(1), k(2)], [b"x", b"y"], [1, 2])
    c.refresh({k(2): V + V}, [])  # 2 grows past what fits with 1: the order evicts 1 (the smallest stamp)
    assert held(c, range(1, 3)) == {2} and c.bytes_cached <= c.max_bytes and c.stats.evictions == 1


def test_an_entry_larger_than_the_cache_is_not_kept():
    c = StateCache(100, "lru")
    assert c.fill([k(1)], [b"x" * 200], 0) == 1
    assert c.bytes_cached == 0 and len(c) == 0 and c.get_many([k(1)]) == [MISSING]


def test_fill_never_overwrites_what_the_cache_holds():
    c = cache(2)
    assert c.fill([k(1), k(2)], [b"new", b"disk"], 1) == 2
    assert c.fill([k(1), k(2)], [b"old", b"older"], 2) == 0  # fetched earlier or as new: kept
    assert c.get_many([k(1), k(2)]) == [b"new", b"disk"]


def test_refreshed_ranges_drop_the_entries_in_them():
    c = cache(4)
    c.fill([k(1), k(2), k(3)], [V, V, V], 1)
    c.fill([k(4)], [V], 2, prefetched=True)
    c.refresh({k(2): b"again"}, [(k(2), k(5))])  # the ranges first (2, 3, 4 dropped), then the changes
    assert held(c, range(1, 6)) == {1}  # 2 was not held any more when its change came: not added
    assert c.stats.prefetched_entries_unread == 1  # 4 was dropped before any read
    assert c.bytes_cached == ENTRY


def test_statistics_count_hits_misses_prefetches_and_evictions():
    c = cache(2)
    c.fill([k(1), k(2)], [V, V], 10, prefetched=True)
    assert c.get_many([k(1), k(1), k(7)], 11) == [V, V, MISSING]  # one prefetch hit, read twice
    c.fill([k(3), k(4)], [V, None], 12)  # 2 is evicted without ever being read, and 1
    assert c.get_many([k(4)]) == [None]  # a negative entry is a hit
    assert c.stats.as_dict() == {
        "hits": 3,
        "misses": 1,
        "evictions": 2,
        "prefetched_entries": 2,
        "prefetched_entries_read": 1,
        "prefetched_entries_unread": 1,
    }
    c.fill([k(5)], [V], 13, prefetched=True)
    c.fill([k(6)], [V], 14, prefetched=True)
    c.refresh({}, [(k(5), k(6))])  # dropped before any read
    c.clear()  # 6 too
    stats = c.stats.take()
    assert stats["prefetched_entries_unread"] == 3 and stats["prefetched_entries"] == 4 and stats["evictions"] == 4
    assert set(c.stats.take().values()) == {0} and len(c) == 0 and c.bytes_cached == 0


def test_negative_entries_are_hits():
    c = cache(2)
    assert c.fill([k(1)], [None], 1) == 1
    assert c.get_many([k(1), k(2)], 2) == [None, MISSING]
    assert c.stats.hits == 1 and c.stats.misses == 1


def test_invalid_arguments_name_themselves():
    for bad in (0, -1, "1m", 1.5, True):
        with pytest.raises(ValueError, match="max_bytes"):
            StateCache(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="policy"):
        StateCache(100, "fifo")
    c = cache(2)
    with pytest.raises(ValueError, match="values"):
        c.fill([k(1)], [V, V], 0)
    with pytest.raises(ValueError, match="ts"):
        c.get_many([k(1), k(2)], [1])
    assert len(c) == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_concurrent_fills_renewals_and_reads_keep_the_accounting_exact(policy: str):
    """Two prefetch threads fill and renew while the batch thread reads, switching as often as possible:
    capacity holds, the byte count is the entries' sum, and every value read is the one filled."""
    keys = [i.to_bytes(2, "big") for i in range(2000)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        c = StateCache(200 * (2 + 4 + ENTRY_OVERHEAD), policy)
        start = threading.Barrier(3)

        def filler(offset: int) -> None:
            start.wait()
            for i, key in enumerate(keys[offset:] + keys[:offset]):
                c.fill([key], [key * 2], i, prefetched=True)
                c.renew([key], i + 1)

        def reader() -> list[bool]:
            start.wait()
            return [value in (MISSING, key * 2) for key, value in zip(keys, c.get_many(keys))]

        with ThreadPoolExecutor(3) as pool:
            done = [pool.submit(filler, 0), pool.submit(filler, 1000), pool.submit(reader)]
            assert all(done[2].result()) and [f.result() for f in done[:2]] == [None, None]
        assert c.bytes_cached <= c.max_bytes
        assert c.bytes_cached == sum(len(key) + len(value or b"") + ENTRY_OVERHEAD for key, value in c.items())
    finally:
        sys.setswitchinterval(interval)


def test_tac_drops_emptied_buckets_at_the_batch_boundary_and_keeps_its_order():
    """Re-stamped keys leave emptied timestamp buckets; they go at the batch's end (refresh), never during reads."""
    order = TimestampOrder()
    for key in range(100):
        order.insert(k(key), key)
    for round_ in range(1, 30):  # every key re-stamped 29 times: 2,900 emptied buckets
        for key in range(100):
            order.touch(k(key), 1000 * round_ + (99 - key))  # the reverse order of the first stamps
    assert len(order._heap) == len(order._buckets) == 3000  # reads never dropped them
    c = cache(4)
    c._order = order
    c.refresh({}, [])
    assert len(order._buckets) == 3000 and len(c) == 0  # applied by the next operation
    assert len(order._heap) == len(order._buckets) == 100
    assert [order.victim() for _ in range(3)] == [k(99), k(98), k(97)]  # the smallest stamps first
