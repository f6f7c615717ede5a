"""The prefetch manager: turns a batch's key hints into cache entries before the batch reads them.

Hints go into a deduplicating buffer with two sections: *unprocessed* (waiting for a thread) and
*in flight* (being fetched); each key keeps its latest hint timestamp. New hints are grouped by
shard and cut into chunks, one multi-get each, queued on a small thread pool; a chunk's fetch fills
the cache with the hints' (future) timestamps. A read first claims the chunks it needs that no
thread has started yet and fetches them itself, all in one fetch (with the shards in parallel, in
the runtime) on its own thread while it looks up the cache; a key whose chunk the pool has in
flight it waits for (a *late hint* either way); a chunk is fetched once, by whoever starts it
first, so no key is fetched twice. Keys nobody hinted are fetched at once (the fallback).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Callable, Sequence

from common.cache_contract import MISSING, ReadCache, stamps_at

from .exceptions import PrefetchFailedError

log = logging.getLogger(__name__)

Fetch = Callable[[Sequence[bytes]], list]
"""Reads keys below the cache (pending commit buffers, then RocksDB); None for an absent key."""


@dataclass
class PrefetchStats:
    """Counters of one batch."""

    hints: int = 0  # hinted keys received
    hints_deduplicated: int = 0  # already waiting or in flight
    hints_renewed: int = 0  # already cached: timestamp renewed, nothing fetched
    prefetched: int = 0  # hinted keys fetched (by the pool, or by a read that reached their chunk first)
    prefetch_hits: int = 0  # reads served by the pool's prefetch (done or in flight)
    wasted_prefetches: int = 0  # prefetched and not read in the batch
    late_hints: int = 0  # read before their prefetch had finished
    fallback_fetches: int = 0  # keys read without a hint (or evicted before their read)
    slack_s_sum: float = 0.0  # hint-to-read time, summed over prefetch hits
    slack_s_min: float | None = None
    fetch_s: float = 0.0  # time spent fetching hinted chunks (the pool's fetches and the reads')
    failed_prefetches: int = 0  # hinted keys whose chunk's fetch failed (each failure is logged)

    def as_dict(self) -> dict[str, float | int | None]:
        """The batch's record, with the mean slack instead of the sum."""
        out = {k: v for k, v in self.__dict__.items() if k != "slack_s_sum"}
        out["slack_s_mean"] = self.slack_s_sum / self.prefetch_hits if self.prefetch_hits else None
        return out


@dataclass(eq=False)
class _Chunk:
    """Hinted keys of one shard, fetched with one multi-get by whoever starts it first."""

    keys: list[bytes]
    started: bool = False
    future: Future = field(default_factory=Future)  # key -> value of the keys it fetched


@dataclass(slots=True)
class _Hint:
    ts: int
    at: float
    chunk: _Chunk


@dataclass(frozen=True)
class _Claim:
    """Chunks one thread started, with their keys and hints in fetch order."""

    chunks: list[_Chunk]
    keys: list[bytes]
    hints: list[_Hint]


@dataclass
class _Misses:
    """A read's keys not found cached: positions to wait for (with their chunk) and to fetch at once."""

    waits: dict[int, _Chunk] = field(default_factory=dict)
    fallback: list[int] = field(default_factory=list)


@dataclass
class _Buffer:
    unprocessed: dict[bytes, _Hint] = field(default_factory=dict)
    in_flight: dict[bytes, _Hint] = field(default_factory=dict)
    fetched: dict[bytes, float] = field(default_factory=dict)  # prefetched, not yet read: key -> hint time


class PrefetchManager:
    """Prefetches hinted keys into ``cache`` on ``threads`` threads; ``read`` serves the batch."""

    READ_SLICE = 512
    """Keys a read looks up in the cache under one hold of its lock."""
    HINT_SLICE = 1024
    """Hinted keys sorted (and their chunks queued) under one hold of the manager's lock."""

    def __init__(
        self,
        cache: ReadCache,
        fetch: Fetch,
        shard_of: Callable[[bytes], int],
        threads: int = 2,
        chunk_keys: int = 2048,
        read_fetch: Fetch | None = None,
    ):
        """``fetch`` serves the pool's chunks; ``read_fetch`` (default ``fetch``) what a read fetches
        itself: the chunks nobody started and the keys nobody hinted, e.g. with the shards in parallel."""
        if threads < 1 or chunk_keys < 1:
            raise ValueError(f"threads ({threads}) and chunk_keys ({chunk_keys}) must be at least 1")
        self.cache = cache
        self.fetch = fetch
        self.read_fetch = read_fetch or fetch
        self.shard_of = shard_of
        self.chunk_keys = chunk_keys
        self.stats = PrefetchStats()
        self._buffer = _Buffer()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="misa-prefetch")
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="misa-read-fetch")  # a read's own chunks

    # ------------------------------------------------------------------ hints
    def hint(self, keys: Sequence[bytes], ts: Sequence[int]) -> None:
        """Queue ``keys`` (with their future event times) for prefetching; duplicates are merged.

        The keys are taken in slices of :attr:`HINT_SLICE`: each slice's chunks are queued before
        the next slice is looked at, so the pool's I/O starts while the rest is still being sorted.
        """
        now = time.monotonic()
        ts = ts.tolist() if hasattr(ts, "tolist") else [int(t) for t in ts]  # NumPy stamps as ints
        for begin in range(0, len(keys), self.HINT_SLICE):
            end = begin + self.HINT_SLICE
            self._hint_slice(keys[begin:end], ts[begin:end], now)

    def _hint_slice(self, keys: Sequence[bytes], ts: list[int], now: float) -> None:
        """Sort one slice of hints: merged into waiting ones, renewals of cached keys, or new chunks."""
        new: dict[bytes, int] = {}
        cached: list[bytes] = []
        cached_ts: list[int] = []
        with self._lock:
            buf = self._buffer
            self.stats.hints += len(keys)
            for key, t, held in zip(keys, ts, self.cache.contains_many(keys)):
                waiting = buf.unprocessed.get(key) or buf.in_flight.get(key)
                if waiting is not None:
                    waiting.ts = max(waiting.ts, t)
                    self.stats.hints_deduplicated += 1
                elif key in new:
                    new[key] = max(new[key], t)
                    self.stats.hints_deduplicated += 1
                elif held:
                    cached.append(key)
                    cached_ts.append(t)
                else:
                    new[key] = t
            chunks = self._chunks(list(new))
            for chunk in chunks:
                for key in chunk.keys:
                    buf.unprocessed[key] = _Hint(new[key], now, chunk)
            self.stats.hints_renewed += len(cached)
        for chunk in chunks:  # the I/O starts first
            self._pool.submit(self._fetch_chunks, [chunk], self.fetch)
        if cached:
            self.cache.renew(cached, cached_ts)

    def _chunks(self, keys: list[bytes]) -> list[_Chunk]:
        """Keys grouped by shard, cut into chunks: one multi-get each."""
        groups: dict[int, list[bytes]] = {}
        for key in keys:
            groups.setdefault(self.shard_of(key), []).append(key)
        return [
            _Chunk(group[i : i + self.chunk_keys])
            for group in groups.values()
            for i in range(0, len(group), self.chunk_keys)
        ]

    def _fetch_chunks(self, chunks: Sequence[_Chunk], fetch: Fetch) -> _Claim:
        """Fetch those of ``chunks`` no thread has started yet; returns what this call fetched."""
        with self._lock:
            claim = self._claim(chunks)
        self._fetch_claimed(claim, fetch)
        return claim

    def _claim(self, chunks: Sequence[_Chunk]) -> _Claim:
        """Start the chunks nobody started yet: their keys move from unprocessed to in flight (lock held)."""
        mine = [chunk for chunk in chunks if not chunk.started]
        buf = self._buffer
        for chunk in mine:
            chunk.started = True
        keys = [key for chunk in mine for key in chunk.keys]
        hints = [buf.unprocessed.pop(key) for key in keys]
        buf.in_flight.update(zip(keys, hints))
        return _Claim(mine, keys, hints)

    def _fetch_claimed(self, claim: _Claim, fetch: Fetch) -> None:
        """Fetch the claimed chunks' keys with one ``fetch``, fill the cache and resolve the chunks.

        The keys stay in flight until they are in the cache, so a read or a hint always finds them
        in one or the other; the cache is filled outside the manager's lock, which reads need.
        """
        if not claim.chunks:
            return
        keys, hints = claim.keys, claim.hints
        started = time.monotonic()
        try:
            values = fetch(keys)
        except Exception as exc:
            log.warning("prefetch of %d key(s) failed; their reads fetch them themselves", len(keys), exc_info=True)
            self._abandon(claim, exc)
            return
        except BaseException as exc:  # interrupted: release the readers waiting on these chunks, then go on
            self._abandon(claim, exc)
            raise
        stamps = [hint.ts for hint in hints]
        self.cache.fill(keys, values, stamps, prefetched=True)
        with self._lock:
            buf = self._buffer
            raised = [(key, hint.ts) for key, hint, ts in zip(keys, hints, stamps) if hint.ts > ts]
            for key in keys:
                hint = buf.in_flight.pop(key, None)  # None: read already (a prefetch hit)
                if hint is not None:
                    buf.fetched[key] = hint.at
            self.stats.prefetched += len(keys)
            self.stats.fetch_s += time.monotonic() - started
        if raised:  # hinted again during the fetch
            self.cache.renew([key for key, _ in raised], [ts for _, ts in raised])
        found = dict(zip(keys, values))
        for chunk in claim.chunks:
            chunk.future.set_result(found)

    def _abandon(self, claim: _Claim, cause: BaseException) -> None:
        """Give up the claimed chunks: their keys leave the buffer and their waiters get a PrefetchFailedError."""
        with self._lock:
            for key in claim.keys:
                self._buffer.in_flight.pop(key, None)
            self.stats.failed_prefetches += len(claim.keys)
        error = PrefetchFailedError(f"prefetch of {len(claim.keys)} key(s) failed: {type(cause).__name__}: {cause}")
        error.__cause__ = cause
        for chunk in claim.chunks:
            chunk.future.set_exception(error)

    # ------------------------------------------------------------------ reads
    def capacity_entries(self) -> int | None:
        """About how many entries the cache holds when full, at the mean size of those it holds now (None while
        it holds none): hints beyond it are evicted before they are read."""
        held, held_bytes = len(self.cache), self.cache.bytes_cached
        return None if held == 0 or held_bytes <= 0 else max(1, self.cache.max_bytes * held // held_bytes)

    def read(self, keys: Sequence[bytes], ts: Sequence[int] | int = 0) -> list[bytes | None]:
        """Values of ``keys`` as the batch sees them: cache, then the hints' chunks, then a fetch.

        First the read claims the chunks it needs that no thread has started and fetches them, all
        at once with ``read_fetch``, on its own thread while it reads the cache (in slices, so the
        pool's fills get in between) and the pool finishes the chunks it started. Then, under the
        manager's lock, a key still missing is waited for if it has a chunk (one hinted during the
        read is fetched here too); otherwise it is looked up again (its prefetch may have landed
        since) and fetched if still missing.
        """
        now = time.monotonic()
        claim = self._claim_unstarted(keys)
        own_fetch = self._reader.submit(self._fetch_claimed, claim, self.read_fetch) if claim.chunks else None
        out = self._read_cache(keys, ts)
        misses = self._sort_misses(keys, ts, out, set(claim.keys), now)
        hinted_since = self._fetch_chunks(list(dict.fromkeys(misses.waits.values())), self.read_fetch)
        self._fetch_into(out, keys, ts, misses.fallback)  # while the pool and the read's thread finish their chunks
        if own_fetch is not None:
            own_fetch.result()
        failed = self._collect_waited(out, keys, misses.waits, set(claim.chunks) | set(hinted_since.chunks))
        self._fetch_into(out, keys, ts, failed)
        return out  # type: ignore[return-value]

    def _claim_unstarted(self, keys: Sequence[bytes]) -> _Claim:
        """Claim the chunks of ``keys`` that no thread has started: the read fetches them itself."""
        with self._lock:
            unprocessed = self._buffer.unprocessed
            return self._claim(list(dict.fromkeys(unprocessed[k].chunk for k in keys if k in unprocessed)))

    def _read_cache(self, keys: Sequence[bytes], ts: Sequence[int] | int) -> list:
        """The cached values of ``keys`` (MISSING where absent), in slices so the pool's fills get in between."""
        out: list = []
        for begin in range(0, len(keys), self.READ_SLICE):
            end = begin + self.READ_SLICE
            out += self.cache.get_many(keys[begin:end], ts if isinstance(ts, int) else ts[begin:end])
        return out

    def _sort_misses(
        self, keys: Sequence[bytes], ts: Sequence[int] | int, out: list, own: set[bytes], now: float
    ) -> _Misses:
        """Under the lock: count the hits, and sort each key still missing into a chunk to wait for, a
        value that landed since the slice was read (filled into ``out``), or a fallback fetch."""
        misses = _Misses()
        with self._lock:
            buf = self._buffer
            again: list[int] = []
            for i, key in enumerate(keys):
                if out[i] is MISSING:
                    hint = buf.in_flight.get(key) or buf.unprocessed.get(key)  # unprocessed: hinted since
                    if hint is not None:
                        misses.waits[i] = hint.chunk
                    else:
                        again.append(i)  # not hinted, or its prefetch landed after the slice was read
                    continue
                self._count_cached(key, own, now)
            self.stats.late_hints += len(misses.waits)
            for i, value in zip(again, self.cache.get_many([keys[i] for i in again], stamps_at(ts, again))):
                if value is MISSING:
                    misses.fallback.append(i)
                    continue
                out[i] = value
                self._count_cached(keys[i], own, now)
            self.stats.fallback_fetches += len(misses.fallback)
        return misses

    def _collect_waited(
        self, out: list, keys: Sequence[bytes], waits: dict[int, _Chunk], fetched_here: set[_Chunk]
    ) -> list[int]:
        """Fill ``out`` from the chunks the read waited for, counting the pool's as hits; the positions
        whose prefetch failed (the read fetches them itself)."""
        failed: list[int] = []
        for i, chunk in waits.items():
            try:
                out[i] = chunk.future.result()[keys[i]]
            except PrefetchFailedError:  # logged where it failed
                failed.append(i)
                continue
            with self._lock:
                hinted_at = self._buffer.fetched.pop(keys[i], None)
                if chunk not in fetched_here:
                    self._hit(time.monotonic() - hinted_at if hinted_at is not None else 0.0)
        return failed

    def _count_cached(self, key: bytes, own: set[bytes], now: float) -> None:
        """A read found ``key`` cached: a prefetch hit if the pool fetched it, a late hint if the read's
        own fetch did (lock held)."""
        buf = self._buffer
        hinted_at = buf.fetched.pop(key, None)
        if hinted_at is None and key in buf.in_flight:
            hinted_at = buf.in_flight.pop(key).at  # filled, its fetch not yet finished
        if key in own:
            self.stats.late_hints += 1
        elif hinted_at is not None:
            self._hit(now - hinted_at)

    def _fetch_into(self, out: list, keys: Sequence[bytes], ts: Sequence[int] | int, positions: list[int]) -> None:
        """Fetch the keys at ``positions`` with ``read_fetch`` into ``out`` and the cache (reads' own fetches)."""
        if not positions:
            return
        wanted = [keys[i] for i in positions]
        fetched = self.read_fetch(wanted)
        for i, value in zip(positions, fetched):
            out[i] = value
        self.cache.fill(wanted, fetched, stamps_at(ts, positions))

    def _hit(self, slack_s: float) -> None:
        self.stats.prefetch_hits += 1
        self.stats.slack_s_sum += slack_s
        self.stats.slack_s_min = slack_s if self.stats.slack_s_min is None else min(self.stats.slack_s_min, slack_s)

    # ------------------------------------------------------------------ batch boundaries
    def quiesce(self) -> None:
        """Drop hints no thread has started and wait for the fetches in flight.

        Called before the batch's changes refresh the cache, so that no fetch
        that started earlier can put a value into the cache that the batch has since changed.
        """
        with self._lock:
            dropped = {h.chunk for h in self._buffer.unprocessed.values()}
            for chunk in dropped:
                chunk.started = True
            self._buffer.unprocessed.clear()
            running = {h.chunk for h in self._buffer.in_flight.values()}
        for chunk in dropped:
            chunk.future.set_result({})
        for chunk in running:
            with suppress(PrefetchFailedError):  # logged where it failed; a read will fetch again
                chunk.future.result()

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
        self._reader.shutdown(wait=True)
