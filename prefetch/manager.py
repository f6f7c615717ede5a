"""The prefetch manager: turns a batch's key hints into cache entries before the batch reads them.

Hints go into a deduplicating buffer with two sections: *unprocessed* (waiting for a thread) and
*in flight* (being fetched); each key keeps its latest hint timestamp. A small thread pool takes
chunks of unprocessed keys, groups them by shard and fetches each group with one multi-get, then
fills the cache with the hint's (future) timestamp. A read that finds a key still unprocessed
takes it over (a *late hint*); a read that finds it in flight waits for that fetch and uses its
result; so no key is fetched twice. Keys nobody hinted are fetched at once (the fallback).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .cache import MISSING, StateCache

Fetch = Callable[[Sequence[bytes]], list]
"""Reads keys below the cache (pending commit buffers, then RocksDB); None for an absent key."""


@dataclass
class PrefetchStats:
    """Counters of one batch."""

    hints: int = 0              # hinted keys received
    hints_deduplicated: int = 0  # already waiting or in flight
    hints_renewed: int = 0       # already cached: timestamp renewed, nothing fetched
    prefetched: int = 0          # keys fetched ahead of their read
    prefetch_hits: int = 0       # reads served by a prefetch (done or in flight)
    wasted_prefetches: int = 0   # prefetched and not read in the batch
    late_hints: int = 0          # read before a thread had picked the hint up
    fallback_fetches: int = 0    # keys read without a hint (or evicted before their read)
    slack_s_sum: float = 0.0     # hint-to-read time, summed over prefetch hits
    slack_s_min: float | None = None
    fetch_s: float = 0.0         # time the pool spent fetching

    def as_dict(self) -> dict[str, float | int | None]:
        """The batch's record, with the mean slack instead of the sum."""
        out = {k: v for k, v in self.__dict__.items() if k != "slack_s_sum"}
        out["slack_s_mean"] = self.slack_s_sum / self.prefetch_hits if self.prefetch_hits else None
        return out

    def wasted_ratio(self) -> float:
        return self.wasted_prefetches / self.prefetched if self.prefetched else 0.0


@dataclass
class _Hint:
    ts: int
    at: float
    future: Future | None = None  # set while in flight


@dataclass
class _Buffer:
    unprocessed: dict[bytes, _Hint] = field(default_factory=dict)
    in_flight: dict[bytes, _Hint] = field(default_factory=dict)
    fetched: dict[bytes, float] = field(default_factory=dict)  # prefetched, not yet read: key -> hint time


class PrefetchManager:
    """Prefetches hinted keys into ``cache`` on ``threads`` threads; ``read`` serves the batch."""

    def __init__(self, cache: StateCache, fetch: Fetch, shard_of: Callable[[bytes], int],
                 threads: int = 2, chunk_keys: int = 2048):
        if threads < 1 or chunk_keys < 1:
            raise ValueError(f"threads ({threads}) and chunk_keys ({chunk_keys}) must be at least 1")
        self.cache = cache
        self.fetch = fetch
        self.shard_of = shard_of
        self.chunk_keys = chunk_keys
        self.stats = PrefetchStats()
        self._buffer = _Buffer()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="misa-prefetch")

    # ------------------------------------------------------------------ hints
    def hint(self, keys: Sequence[bytes], ts: Sequence[int]) -> None:
        """Queue ``keys`` (with their future event times) for prefetching; duplicates are merged."""
        now = time.monotonic()
        new: list[bytes] = []
        cached: list[bytes] = []
        cached_ts: list[int] = []
        with self._lock:
            buf = self._buffer
            self.stats.hints += len(keys)
            for key, t in zip(keys, ts):
                waiting = buf.unprocessed.get(key) or buf.in_flight.get(key)
                if waiting is not None:
                    waiting.ts = max(waiting.ts, int(t))
                    self.stats.hints_deduplicated += 1
                elif self.cache.contains(key):
                    cached.append(key)
                    cached_ts.append(int(t))
                else:
                    buf.unprocessed[key] = _Hint(int(t), now)
                    new.append(key)
            self.stats.hints_renewed += len(cached)
        if cached:
            self.cache.renew(cached, cached_ts)
        for chunk in self._chunks(new):
            self._pool.submit(self._prefetch, chunk)

    def _chunks(self, keys: list[bytes]) -> list[list[bytes]]:
        """Keys grouped by shard, cut into chunks: one multi-get each."""
        groups: dict[int, list[bytes]] = {}
        for key in keys:
            groups.setdefault(self.shard_of(key), []).append(key)
        return [group[i:i + self.chunk_keys] for group in groups.values()
                for i in range(0, len(group), self.chunk_keys)]

    def _prefetch(self, chunk: list[bytes]) -> None:
        """Worker: take the chunk's still-unprocessed keys, fetch them, fill the cache."""
        future: Future = Future()
        with self._lock:
            buf = self._buffer
            taken = [k for k in chunk if k in buf.unprocessed]
            for key in taken:
                hint = buf.unprocessed.pop(key)
                hint.future = future
                buf.in_flight[key] = hint
        if not taken:
            return
        started = time.monotonic()
        try:
            values = self.fetch(taken)
        except BaseException as exc:  # the readers waiting on this chunk fetch it themselves
            with self._lock:
                for key in taken:
                    self._buffer.in_flight.pop(key, None)
            future.set_exception(exc)
            return
        with self._lock:
            buf = self._buffer
            hints = [buf.in_flight.pop(k) for k in taken]
            self.cache.fill(taken, values, [h.ts for h in hints], prefetched=True)
            for key, hint in zip(taken, hints):
                buf.fetched[key] = hint.at
            self.stats.prefetched += len(taken)
            self.stats.fetch_s += time.monotonic() - started
        future.set_result(dict(zip(taken, values)))

    # ------------------------------------------------------------------ reads
    def read(self, keys: Sequence[bytes], ts: Sequence[int] | int = 0) -> list[bytes | None]:
        """Values of ``keys`` as the batch sees them: cache, then in-flight prefetches, then a fetch.

        The cache is read under the manager's lock, so no prefetch can land between finding a key
        missing and finding it no longer in flight (which would fetch it a second time).
        """
        now = time.monotonic()
        waits: dict[int, Future] = {}
        fallback: list[int] = []
        with self._lock:
            out = self.cache.get_many(keys, ts)
            misses = [i for i, v in enumerate(out) if v is MISSING]
            buf = self._buffer
            for i, key in enumerate(keys):
                hinted_at = buf.fetched.pop(key, None)
                if hinted_at is not None and out[i] is not MISSING:
                    self._hit(now - hinted_at)
            for i in misses:
                key = keys[i]
                if key in buf.in_flight:
                    waits[i] = buf.in_flight[key].future  # type: ignore[assignment]
                    self.stats.late_hints += 1
                    continue
                late = buf.unprocessed.pop(key, None)
                if late is not None:
                    self.stats.late_hints += 1
                else:
                    self.stats.fallback_fetches += 1
                fallback.append(i)
        for i, future in waits.items():
            try:
                out[i] = future.result()[keys[i]]
                with self._lock:
                    hinted_at = self._buffer.fetched.pop(keys[i], None)
                    self._hit(time.monotonic() - hinted_at if hinted_at is not None else 0.0)
            except Exception:  # the prefetch failed: read it here (the error, if real, shows again)
                fallback.append(i)
        if fallback:
            fetched = self.fetch([keys[i] for i in fallback])
            for i, value in zip(fallback, fetched):
                out[i] = value
            key_ts = [ts] * len(fallback) if isinstance(ts, int) else [ts[i] for i in fallback]
            self.cache.fill([keys[i] for i in fallback], fetched, key_ts)
        return out  # type: ignore[return-value]

    def _hit(self, slack_s: float) -> None:
        self.stats.prefetch_hits += 1
        self.stats.slack_s_sum += slack_s
        self.stats.slack_s_min = slack_s if self.stats.slack_s_min is None else min(self.stats.slack_s_min, slack_s)

    # ------------------------------------------------------------------ batch boundaries
    def quiesce(self) -> None:
        """Drop hints no thread has started and wait for the fetches in flight.

        Called before a range delete and before the batch's changes are drained, so that no fetch
        that started earlier can put a value into the cache that the batch has since changed.
        """
        with self._lock:
            self._buffer.unprocessed.clear()
            futures = {id(h.future): h.future for h in self._buffer.in_flight.values() if h.future}
        for future in futures.values():
            try:
                future.result()
            except Exception:  # a failed prefetch has nothing to fill; a read will fetch again
                pass

    def take_stats(self) -> PrefetchStats:
        """End of batch: the batch's counters (prefetched keys never read count as wasted); resets them."""
        self.quiesce()
        with self._lock:
            self.stats.wasted_prefetches += len(self._buffer.fetched)
            self._buffer.fetched.clear()
            stats, self.stats = self.stats, PrefetchStats()
        return stats

    def clear(self) -> None:
        """Forget every hint (the state was reloaded)."""
        self.quiesce()
        with self._lock:
            self._buffer = _Buffer()
            self.stats = PrefetchStats()

    def close(self) -> None:
        self.quiesce()
        self._pool.shutdown(wait=True)
