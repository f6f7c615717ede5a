"""The state cache: TAC, LRU and Clock eviction, byte capacity, the eviction buffer, drain, statistics."""
from __future__ import annotations

import threading

import pytest

from prefetch.cache import ENTRY_OVERHEAD, MISSING, StateCache

V = b"v" * 36  # 1-byte keys + 36-byte values + overhead = 101 bytes per entry
ENTRY = 1 + len(V) + ENTRY_OVERHEAD


def k(i: int) -> bytes:
    return bytes([i])


def cache(entries: int, policy: str = "tac") -> StateCache:
    return StateCache(entries * ENTRY, policy)


def cached(c: StateCache, ids: range) -> set[int]:
    return {i for i in ids if c.contains(k(i))}


def test_tac_evicts_the_smallest_timestamps_with_accessed_and_prefetched_entries_mixed():
    c = cache(4)
    c.fill([k(1), k(2)], [V, V], [10, 20])            # read at event times 10 and 20
    c.fill([k(3), k(4)], [V, V], [50, 60], prefetched=True)  # hinted for future times 50 and 60
    c.get_many([k(1)], 30)                              # read again at 30: now 2 is the oldest
    c.fill([k(5)], [V], 40)
    assert cached(c, range(1, 6)) == {1, 3, 4, 5}
    c.fill([k(6)], [V], 45)                             # 1 (30) goes next, the prefetched ones stay
    assert cached(c, range(1, 7)) == {3, 4, 5, 6}
    assert c.stats.evictions == 2 and c.stats.wasted_prefetches == 0


def test_a_renewed_hint_saves_an_entry_and_a_read_sets_its_time():
    c = cache(3)
    c.fill([k(1), k(2), k(3)], [V, V, V], [10, 20, 30])
    assert c.renew([k(1), k(9)], [100, 100]) == 1       # only 1 is cached
    c.fill([k(4)], [V], 40)
    assert cached(c, range(1, 5)) == {1, 3, 4}
    c.renew([k(3)], 5)                                  # a hint never lowers a timestamp
    c.get_many([k(1)], 25)                              # a read sets it to the access time (100 -> 25)
    c.fill([k(5)], [V], 50)
    assert cached(c, range(1, 6)) == {3, 4, 5}


def test_lru_and_clock_follow_their_textbook_orders():
    lru = cache(3, "lru")
    lru.fill([k(1), k(2), k(3)], [V, V, V], 0)
    lru.get_many([k(1)])
    lru.fill([k(4)], [V], 0)
    assert cached(lru, range(1, 5)) == {1, 3, 4}        # 2 was least recently used
    clock = cache(3, "clock")
    clock.fill([k(1), k(2), k(3)], [V, V, V], 0)
    clock.get_many([k(1), k(2)])                        # reference bits on 1 and 2
    clock.fill([k(4)], [V], 0)
    assert cached(clock, range(1, 5)) == {1, 2, 4}      # 1 and 2 get a second chance, 3 goes
    clock.fill([k(5)], [V], 0)
    assert cached(clock, range(1, 6)) == {1, 2, 5}      # the hand is at 4, which was never read
    assert len(clock) == 3


def test_dirty_entries_evicted_before_the_commit_stay_readable_and_are_drained_once():
    c = cache(2)
    c.put_many([k(1)], [b"a"], 1)
    c.put_many([k(1)], [b"b"], 2)                       # one write per key per batch
    c.put_many([k(2), k(3), k(4)], [V, V, None], 3)
    assert c.stats.dirty_evictions >= 1 and c.eviction_buffer_bytes > 0
    assert c.get_many([k(1), k(4)], 5) == [b"b", None]  # read your writes through the eviction buffer
    changes, ranges = c.drain()
    assert changes == {k(1): b"b", k(2): V, k(3): V, k(4): None} and ranges == []
    assert c.dirty_count == 0 and c.eviction_buffer_bytes == 0
    assert c.drain() == ({}, [])


def test_byte_capacity_is_respected_after_every_operation():
    c = StateCache(1000, "tac")
    for i in range(60):
        c.fill([k(i)], [b"x" * (i % 7)], i)
        c.put_many([k(100 + i % 50)], [b"y" * 20], i)
        assert c.bytes_cached <= 1000
    assert c.bytes_cached == sum(len(key) + len(value or b"") + ENTRY_OVERHEAD
                                 for key, value in c.items(b"", b"\xff") if c.contains(key)) - c.eviction_buffer_bytes


def test_fill_never_overwrites_what_the_cache_knows():
    c = cache(4)
    c.put_many([k(1)], [b"new"], 1)
    assert c.fill([k(1), k(2)], [b"old", b"disk"], 1) == 1
    assert c.get_many([k(1), k(2)]) == [b"new", b"disk"]
    c.delete_range(k(2), k(3))
    assert c.fill([k(2)], [b"stale"], 2) == 0           # deleted this batch: a late fetch must not revive it
    assert c.get_many([k(2)]) == [None]


def test_range_deletes_hide_cached_dirty_and_evicted_keys_and_later_puts_survive():
    c = cache(2)
    c.fill([k(1)], [V], 1)
    c.put_many([k(2), k(3), k(4)], [V, V, V], 2)        # some of these are in the eviction buffer now
    c.delete_range(k(1), k(4))
    assert c.get_many([k(1), k(2), k(3), k(4), k(9)]) == [None, None, None, V, MISSING]
    c.put_many([k(2)], [b"again"], 3)                    # a put after the range delete
    changes, ranges = c.drain()
    assert ranges == [(k(1), k(4))]
    assert changes == {k(2): b"again", k(4): V}          # the commit applies ranges first, then these
    assert c.get_many([k(3)]) == [MISSING]               # after the drain the range is the store's business


def test_statistics():
    c = cache(2)
    c.fill([k(1), k(2)], [V, V], 10, prefetched=True)
    assert c.get_many([k(1), k(1), k(7)], 11) == [V, V, MISSING]
    c.fill([k(3), k(4)], [V, None], 12)                  # 2 is evicted without ever being read
    assert c.get_many([k(4)]) == [None]                  # a negative entry is a hit
    stats = c.stats.take()
    assert stats == {"hits": 3, "misses": 1, "evictions": 2, "dirty_evictions": 0, "prefetched": 2,
                     "prefetch_hits": 1, "wasted_prefetches": 1}
    assert c.stats.take()["hits"] == 0


def test_invalid_arguments_name_themselves():
    with pytest.raises(ValueError, match="max_bytes"):
        StateCache(0)
    with pytest.raises(ValueError, match="policy"):
        StateCache(100, "fifo")


def test_concurrent_fills_lose_no_dirty_write():
    c = StateCache(200 * ENTRY, "tac")
    keys = [i.to_bytes(2, "big") for i in range(2000)]

    def filler(offset: int) -> None:
        for i in range(offset, 2000, 2):
            c.fill([keys[i]], [b"disk"], i)

    threads = [threading.Thread(target=filler, args=(o,)) for o in (0, 1)]
    for t in threads:
        t.start()
    for i in range(0, 2000, 3):
        c.put_many([keys[i]], [b"mine"], i)
    for t in threads:
        t.join()
    changes, _ = c.drain()
    assert changes == {keys[i]: b"mine" for i in range(0, 2000, 3)}
