"""The prefetch manager over a real cache: dedup, no key fetched twice, statistics; the lookahead selector."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from prefetch.cache import StateCache
from prefetch.lookahead import AHEAD, IN_BATCH, HintTiming, LookaheadSelector, wasted_share
from prefetch.manager import PrefetchManager

STORE = {f"k{i}".encode(): f"v{i}".encode() for i in range(100)}


class Backend:
    """A fetch function over STORE that counts each key it reads and can be held back."""

    def __init__(self) -> None:
        self.fetched: Counter[bytes] = Counter()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, keys):
        self.entered.set()
        self.gate.wait(10)
        with self._lock:
            self.fetched.update(keys)
        return [STORE.get(k) for k in keys]


def settle(m: PrefetchManager, backend: Backend, fetched: int) -> None:
    """Wait until the pool has fetched ``fetched`` keys (quiesce alone drops hints not started)."""
    deadline = time.monotonic() + 10
    while sum(backend.fetched.values()) < fetched and time.monotonic() < deadline:
        time.sleep(0.01)
    m.quiesce()


def keys(*ids: int) -> list[bytes]:
    return [f"k{i}".encode() for i in ids]


@pytest.fixture
def backend() -> Backend:
    return Backend()


def manager(backend: Backend, threads: int = 2, chunk_keys: int = 4) -> PrefetchManager:
    return PrefetchManager(StateCache(1 << 20, "tac"), backend, lambda key: int(key[1:]) % 2, threads, chunk_keys)


def test_hints_are_deduplicated_and_fetched_once(backend):
    m = manager(backend)
    hinted = time.monotonic()
    m.hint(keys(1, 2, 3, 1), [10, 10, 10, 20])
    m.hint(keys(2, 3), [30, 30])
    settle(m, backend, 3)
    assert backend.fetched == Counter(keys(1, 2, 3))
    time.sleep(0.05)  # the slack: from the hints to the read
    assert m.read(keys(1, 2, 3), 40) == [b"v1", b"v2", b"v3"]
    read = time.monotonic()
    assert backend.fetched == Counter(keys(1, 2, 3))  # all three reads were cache hits
    stats = m.take_stats()
    assert (stats.hints, stats.prefetched, stats.prefetch_hits, stats.fallback_fetches) == (6, 3, 3, 0)
    assert stats.hints_deduplicated + stats.hints_renewed == 3
    slack = stats.as_dict()
    assert 0.05 <= slack["slack_s_min"] <= slack["slack_s_mean"] <= read - hinted


class SortingWatchCache(StateCache):
    """A cache that notes, each time the manager sorts a slice of hints, how many chunks it had queued."""

    def __init__(self, queued: list):
        super().__init__(1 << 20, "tac")
        self.queued = queued
        self.queued_at_slice: list[int] = []

    def contains_many(self, keys):
        self.queued_at_slice.append(len(self.queued))
        return super().contains_many(keys)


def test_hints_are_queued_slice_by_slice_so_the_fetches_start_before_all_are_sorted(backend):
    queued: list = []
    m = PrefetchManager(SortingWatchCache(queued), backend, lambda key: 0, threads=1, chunk_keys=2)
    submit = m._pool.submit
    m._pool.submit = lambda *task: (queued.append(task), submit(*task))[1]
    m.HINT_SLICE = 4
    m.hint(keys(*range(10)), [5] * 10)
    assert m.cache.queued_at_slice == [0, 2, 4]  # each slice's two chunks went to the pool before the next was sorted
    settle(m, backend, 10)
    assert backend.fetched == Counter(keys(*range(10)))
    assert m.take_stats().prefetched == 10
    m.close()


def test_a_cached_key_is_renewed_not_fetched(backend):
    m = manager(backend)
    m.read(keys(5), 1)  # a fallback fetch puts k5 in the cache
    m.hint(keys(5), [99])
    settle(m, backend, 1)
    assert backend.fetched[keys(5)[0]] == 1
    assert m.take_stats().hints_renewed == 1


def test_a_read_waits_for_a_chunk_in_flight_and_fetches_an_unstarted_one_itself(backend):
    m = manager(backend, threads=1, chunk_keys=1)
    backend.gate.clear()
    backend.entered.clear()
    m.hint(keys(2, 4), [5, 5])  # one shard, two chunks: k2 is fetched first, k4 waits behind it
    assert backend.entered.wait(5)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(m.read(keys(2, 4, 7), 6)))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive()  # held back with the pool
    backend.gate.set()
    reader.join(5)
    assert result == [[b"v2", b"v4", b"v7"]]
    m.quiesce()
    assert backend.fetched == Counter(keys(2, 4, 7))  # no key was fetched twice
    stats = m.take_stats()
    assert stats.late_hints == 2  # k2 in flight, k4 not yet started
    assert stats.prefetched == 2 and stats.prefetch_hits == 1  # k4 was fetched by the read: no hit
    assert stats.fallback_fetches == 1 and stats.wasted_prefetches == 0


class ThreadRecordingBackend(Backend):
    """Also records which thread fetched each chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.by_thread: list[tuple[str, list[bytes]]] = []

    def __call__(self, keys):
        self.by_thread.append((threading.current_thread().name, list(keys)))
        return super().__call__(keys)


def test_a_read_fetches_all_the_unstarted_chunks_at_once_while_the_pool_goes_on():
    backend = ThreadRecordingBackend()
    reads = ThreadRecordingBackend()
    m = PrefetchManager(StateCache(1 << 20, "tac"), backend, lambda key: 0, threads=1, chunk_keys=1, read_fetch=reads)
    backend.gate.clear()
    backend.entered.clear()
    m.hint(keys(0, 2, 4, 6), [5] * 4)  # four one-key chunks; the one thread holds k0
    assert backend.entered.wait(5)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(m.read(keys(0, 2, 4, 6, 8), 6)), name="reader")
    reader.start()
    reader.join(0.3)
    assert reader.is_alive()  # waiting for k0, in flight in the pool
    # the unstarted chunks at once, on the read's fetch thread; k8, nobody's hint, by the read itself
    assert sorted(reads.by_thread) == [("misa-read-fetch_0", keys(2, 4, 6)), ("reader", keys(8))]
    backend.gate.set()
    reader.join(5)
    assert result == [[b"v0", b"v2", b"v4", b"v6", b"v8"]]
    m.quiesce()
    assert backend.by_thread == [("misa-prefetch_0", keys(0))]  # the pool fetched only what it had started
    assert backend.fetched + reads.fetched == Counter(keys(0, 2, 4, 6, 8))  # each key once
    stats = m.take_stats()
    assert stats.late_hints == 4 and stats.prefetched == 4 and stats.fallback_fetches == 1
    assert stats.prefetch_hits == 1  # k0; the read fetched the others itself


class LookupAfterFetchCache(StateCache):
    """A cache whose lookups record whether a fetch had started by then (waiting a while for one)."""

    def __init__(self, fetch_started: threading.Event):
        super().__init__(1 << 20, "tac")
        self.fetch_started = fetch_started
        self.fetching_during_lookup: list[bool] = []

    def get_many(self, keys, ts=0):
        self.fetching_during_lookup.append(self.fetch_started.wait(2))
        return super().get_many(keys, ts)


def test_a_read_starts_fetching_its_unstarted_chunks_before_it_looks_up_the_cache(backend):
    reads = Backend()
    reads.entered.clear()
    cache = LookupAfterFetchCache(reads.entered)
    m = PrefetchManager(cache, backend, lambda key: 0, threads=1, chunk_keys=1, read_fetch=reads)
    backend.gate.clear()
    backend.entered.clear()
    m.hint(keys(0, 1, 2), [5] * 3)  # the one thread holds k0; k1 and k2 wait unstarted
    assert backend.entered.wait(5)
    assert m.read(keys(1, 2), 6) == [b"v1", b"v2"]
    assert cache.fetching_during_lookup[0]  # their fetch ran while the read looked up the cache
    assert reads.fetched == Counter(keys(1, 2))
    backend.gate.set()
    m.close()


class RacingCache(StateCache):
    """A cache whose lookup gives a prefetch in flight time to land right after it (the race of a read)."""

    def __init__(self, backend: Backend):
        super().__init__(1 << 20, "tac")
        self.backend = backend
        self.filled = threading.Event()

    def get_many(self, keys, ts=0):
        out = super().get_many(keys, ts)
        self.backend.gate.set()  # let the held-back prefetch finish now
        self.filled.wait(0.3)  # it lands here unless the read's lookup holds it off
        return out

    def fill(self, keys, values, ts, *, prefetched=False):
        inserted = super().fill(keys, values, ts, prefetched=prefetched)
        self.filled.set()
        return inserted


def test_a_prefetch_landing_just_after_the_reads_cache_lookup_is_not_fetched_again(backend):
    cache = RacingCache(backend)
    m = PrefetchManager(cache, backend, lambda key: 0, threads=1, chunk_keys=8)
    backend.gate.clear()
    backend.entered.clear()
    m.hint(keys(3), [5])
    assert backend.entered.wait(5)  # k3 is in flight, its fetch held back
    assert m.read(keys(3), 6) == [b"v3"]
    m.quiesce()
    assert backend.fetched == Counter(keys(3))
    stats = m.take_stats()
    assert stats.fallback_fetches == 0 and stats.prefetch_hits == 1


def test_prefetches_never_read_are_wasted(backend):
    m = manager(backend)
    m.hint(keys(*range(10)), [1] * 10)
    settle(m, backend, 10)
    m.read(keys(0, 1, 2), 2)
    stats = m.take_stats()
    assert (stats.prefetched, stats.prefetch_hits, stats.wasted_prefetches) == (10, 3, 7)
    assert wasted_share(stats.prefetched, stats.wasted_prefetches) == pytest.approx(0.7)
    assert wasted_share(0, 0) == 0.0  # a batch without prefetches wasted none
    assert m.take_stats().wasted_prefetches == 0  # counted once, in its own batch


def test_a_failed_prefetch_is_read_by_the_batch(backend):
    calls = []

    def flaky(batch):
        calls.append(list(batch))
        if len(calls) == 1:
            raise OSError("disk hiccup")
        return backend(batch)

    m = PrefetchManager(StateCache(1 << 20), flaky, lambda key: 0, threads=1, chunk_keys=8)
    m.hint(keys(1, 2), [1, 1])
    m.quiesce()
    assert m.read(keys(1, 2), 2) == [b"v1", b"v2"]


def test_missing_keys_are_cached_as_absent(backend):
    m = manager(backend)
    assert m.read([b"nope"], 1) == [None]
    assert m.read([b"nope"], 2) == [None]
    assert backend.fetched[b"nope"] == 1


def test_lookahead_moves_to_a_later_stage_when_prefetches_are_wasted():
    selector = LookaheadSelector(stages=2, wasted_threshold=0.5, patience=2, min_prefetches=10)
    assert selector.observe(prefetched=100, wasted=80) == 0  # one bad batch is not enough
    assert selector.observe(prefetched=5, wasted=5) == 0  # too few prefetches to judge
    assert selector.observe(prefetched=100, wasted=70) == 1
    assert selector.observe(prefetched=100, wasted=90) == 1  # there is no later stage
    calm = LookaheadSelector(stages=3, wasted_threshold=0.5, patience=2, min_prefetches=10)
    for _ in range(5):
        assert calm.observe(prefetched=100, wasted=20) == 0
    with pytest.raises(ValueError, match="wasted_threshold"):
        LookaheadSelector(stages=2, wasted_threshold=1.5)


def test_hint_timing_tries_in_batch_hints_when_ahead_is_poor_and_keeps_them_only_if_clearly_better():
    timing = HintTiming(wasted_threshold=0.5, late_threshold=0.5, patience=2, retry_after=3, min_prefetches=10)
    assert timing.observe(AHEAD, prefetched=100, wasted=10, hits=90, late=5) == AHEAD  # a good batch
    assert timing.observe(AHEAD, prefetched=100, wasted=60, hits=40, late=0) == AHEAD  # one poor batch
    assert timing.observe(AHEAD, prefetched=5, wasted=5, hits=0, late=0) == AHEAD  # too few to judge
    assert timing.observe(AHEAD, prefetched=100, wasted=0, hits=100, late=80) == IN_BATCH  # late: try in-batch
    # in-batch wastes as much (a cache too small for a batch, say): back to ahead, left alone for 3 batches
    assert timing.observe(IN_BATCH, prefetched=100, wasted=60, hits=40, late=0) == IN_BATCH
    assert timing.observe(IN_BATCH, prefetched=100, wasted=65, hits=35, late=0) == AHEAD
    poor = {"prefetched": 100, "wasted": 90, "hits": 10, "late": 0}
    assert [timing.observe(AHEAD, **poor) for _ in range(3)] == [AHEAD] * 3  # settled: not questioned
    assert [timing.observe(AHEAD, **poor) for _ in range(2)] == [AHEAD, IN_BATCH]
    # now in-batch is clearly better: kept for 3 batches, then ahead is tried again
    assert timing.observe(IN_BATCH, prefetched=100, wasted=5, hits=95, late=0) == IN_BATCH
    assert timing.observe(IN_BATCH, prefetched=100, wasted=5, hits=95, late=0) == IN_BATCH
    assert [timing.observe(IN_BATCH, 100, 5, 95, 0) for _ in range(3)] == [IN_BATCH, IN_BATCH, AHEAD]
    with pytest.raises(ValueError, match="thresholds"):
        HintTiming(wasted_threshold=0.5, late_threshold=2.0)


def test_a_failed_prefetch_is_logged_with_its_cause_and_the_read_fetches_the_keys_itself(caplog):
    """The pool's fetch fails once: the failure is logged with its traceback and counted, and the read that
    needed those keys fetches them itself and returns the right values."""
    calls = Counter()

    def flaky(batch):
        calls["pool"] += 1
        if calls["pool"] == 1:
            raise OSError("disk on fire")
        return [STORE.get(k) for k in batch]

    m = PrefetchManager(
        StateCache(1 << 20, "tac"),
        flaky,
        lambda key: 0,
        threads=1,
        chunk_keys=8,
        read_fetch=lambda batch: [STORE.get(k) for k in batch],
    )
    try:
        with caplog.at_level("WARNING", logger="prefetch.manager"):
            m.hint(keys(1, 2, 3), [1, 1, 1])
            deadline = time.monotonic() + 10
            while not m.stats.failed_prefetches and time.monotonic() < deadline:
                time.sleep(0.01)
            assert m.read(keys(1, 2, 3, 4), 1) == [STORE[k] for k in keys(1, 2, 3, 4)]
        failures = [r for r in caplog.records if "prefetch of 3 key(s) failed" in r.getMessage()]
        assert len(failures) == 1 and failures[0].exc_info is not None
        assert "disk on fire" in str(failures[0].exc_info[1])
        assert m.take_stats().failed_prefetches == 3
    finally:
        m.close()
