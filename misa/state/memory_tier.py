"""The memory tier: whole key spaces of the state held in memory, so that their point reads need no RocksDB look-up.

An operator names the key spaces it looks up every batch (``memory_spaces()``: a deduplication's remembered keys,
tumbling windows' states, an interval join's buckets, a keyed join's right rows, a lookup aggregation's looked-up
values); the tier holds each such space *whole*, as of the last frozen version: loaded from RocksDB and the pending
commit buffers as soon as the state is loaded, in the background (:meth:`MemoryTier.start_loading`; a space not
loaded yet is loaded by its first read), then kept current with every batch's changes, applied when the batch's
version is frozen. Because it is whole, a key it does not hold is absent: a read of a held space never reaches
RocksDB, present or not. The commit still writes every change to RocksDB in order, so recovery is unchanged; a reload
of the state forgets the tier and loads it again.

A space keyed by window (``MemorySpace.window_bytes``: every key starts with its window's end, as an interval join's
buckets do) is held as one dict per window (:mod:`misa.state.held_entries`), so that the watermark's range delete of
closed windows drops them whole.

A batch's reads are one ``map`` per dict, its puts one ``update`` into the batch's changes of the space (the view's
``put_many`` calls give them space by space), no Python per key. Keeping a space current costs about a microsecond
per change (a dict of millions of entries misses the CPU caches), a RocksDB look-up 2 to 8 µs: the tier pays where
look-ups cost more than the upkeep (docs/benchmarks.md measures each operator; sliding windows' panes, session windows
and the stream join, which write about as much as they read, were measured no cheaper with it). A space past the byte
budget (``spark.misa.state.memoryTier.maxBytes``) is dropped, with a warning, and its reads go to RocksDB again, as
without the tier.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Sequence

from misa.state.held_entries import FlatEntries, WindowedEntries
from misa.units import human_bytes

log = logging.getLogger(__name__)

LOAD_CHUNK = 65_536  # entries a load reads between two checks of the budget
ENTRY_OVERHEAD = 120  # bytes Python spends per entry besides the key's and value's bytes (dict slot, two objects)

MEMORY_COUNTERS = ("memory_reads", "memory_loaded")  # a batch's counters, beside the read cache's

Loader = Callable[[bytes, bytes], Iterable[tuple[bytes, bytes]]]  # the live entries of [begin, end), below the batch


class MemorySpace(NamedTuple):
    """A key range [begin, end) an operator asks the tier to hold; ``window_bytes`` > 0: every key of it starts with
    its window's end in that many bytes, and whole windows are deleted by range (the tier holds a dict per window)."""

    begin: bytes
    end: bytes
    window_bytes: int = 0


@dataclass
class HeldSpace:
    """One key space [begin, end): once loaded, all of its live entries; the running batch's changes to it."""

    begin: bytes
    end: bytes
    window_bytes: int = 0  # > 0: the entries are held per window (their keys' first ``window_bytes`` bytes)
    entries: FlatEntries | WindowedEntries | None = None  # None: not loaded (yet), or dropped
    changes: dict[bytes, bytes | None] = field(default_factory=dict)  # the running batch's (None: deleted)
    dropped: bool = False  # over the budget: never held again by this tier
    entry_bytes: float = 0.0  # an entry's mean size (key and value), from the load and the changes since

    def covers(self, low: bytes, high: bytes) -> bool:
        return self.begin <= low and high < self.end

    def overlaps(self, begin: bytes, end: bytes) -> bool:
        return begin < self.end and self.begin < end

    @property
    def shown(self) -> str:
        """The range for messages: ``[begin, end)`` as bytes literals."""
        return f"[{self.begin!r}, {self.end!r})"

    @property
    def bytes(self) -> int:
        """The entries' estimated memory: their count times the mean size and the overheads."""
        return 0 if self.entries is None else int(len(self.entries) * (self.entry_bytes + ENTRY_OVERHEAD))

    def new_entries(self) -> FlatEntries | WindowedEntries:
        """An empty store of entries for this space."""
        return WindowedEntries(self.window_bytes) if self.window_bytes else FlatEntries()


class MemoryTier:
    """Whole key spaces in memory as of the last frozen version; reads of a held space answered without RocksDB.

    The view calls :meth:`put_many` and :meth:`delete_range` with the batch's writes (as its write buffer gets them),
    :meth:`freeze` when the batch's version is frozen, :meth:`get_many` below its read cache and :meth:`clear` when
    the state is reloaded."""

    def __init__(self, spaces: Sequence[MemorySpace | tuple[bytes, bytes]], max_bytes: int):
        self.spaces = [HeldSpace(*MemorySpace(*space)) for space in sorted(spaces)]
        self.max_bytes = max_bytes
        self._reads = self._loaded = 0  # since the last take_stats()
        self._lock = threading.Lock()  # reads, loads and a freeze one at a time (prefetch threads read too)
        self._loader: threading.Thread | None = None

    @property
    def bytes(self) -> int:
        """The held entries' estimated memory."""
        return sum(space.bytes for space in self.spaces)

    def _space_of(self, low: bytes, high: bytes) -> HeldSpace | None:
        """The space holding every key from ``low`` to ``high`` (None: none does, or it was dropped)."""
        for space in self.spaces:
            if space.covers(low, high):
                return None if space.dropped else space
        return None

    # ------------------------------------------------------------------ reads
    def get_many(self, keys: Sequence[bytes], load: Loader) -> list[bytes | None] | None:
        """Values of ``keys`` as the last frozen version left them (None: absent) if they all lie in one held space,
        loading it first with ``load`` if needed; None if the tier does not hold them (keys of several spaces or of
        none, a dropped space)."""
        if not keys:
            return None
        space = self._space_of(min(keys), max(keys))
        if space is None:
            return None
        with self._lock:  # against a load or a freeze meanwhile
            entries = space.entries if space.entries is not None else self._load(space, load)
            if entries is None:
                return None
            self._reads += len(keys)
            return entries.get_many(keys)

    def start_loading(self, load: Loader) -> None:
        """Load every space not held yet in a thread of its own (the state was just loaded: the first batch's reads
        find them held, or wait for the rest of the load instead of starting it)."""
        self.wait()
        self._loader = threading.Thread(target=self._load_all, args=(load,), name="misa-memory-tier", daemon=True)
        self._loader.start()

    def _load_all(self, load: Loader) -> None:
        for space in self.spaces:
            with self._lock:
                if space.entries is None and not space.dropped:
                    try:
                        self._load(space, load)
                    except Exception as exc:  # noqa: BLE001 - the first read of the space loads it and meets it
                        log.warning("misa memory tier: loading the state's keys %s failed: %s", space.shown, exc)
                        return

    def wait(self) -> None:
        """Until a background load started by :meth:`start_loading` has ended."""
        if self._loader is not None:
            self._loader.join()
            self._loader = None

    def _load(self, space: HeldSpace, load: Loader) -> FlatEntries | WindowedEntries | None:
        """Read the whole space (RocksDB and the pending buffers, below the running batch), a chunk at a time;
        None if it passes the budget (reading stops there)."""
        started = time.monotonic()
        entries = space.new_entries()
        space.entries, sizes = entries, 0
        try:
            items = iter(load(space.begin, space.end))
            while chunk := list(itertools.islice(items, LOAD_CHUNK)):
                entries.add(chunk)
                sizes += sum(len(k) + len(v) for k, v in chunk)
                space.entry_bytes = sizes / len(entries)
                if not self._fits(space, "loading it"):
                    return None
        except BaseException:
            space.entries = None  # never held in part: the next read loads it again (and meets the error itself)
            raise
        self._loaded += len(entries)
        log.info(
            "misa memory tier: loaded %d keys of the state's keys %s (about %s) in %.2f s",
            len(entries),
            space.shown,
            human_bytes(space.bytes),
            time.monotonic() - started,
        )
        return entries

    def _fits(self, space: HeldSpace, doing: str) -> bool:
        """Within the budget; else drop ``space`` for good (its reads go to RocksDB) and say so."""
        if self.bytes <= self.max_bytes:
            return True
        log.warning(
            "misa memory tier: the state's keys %s need about %s on %s, over spark.misa.state.memoryTier.maxBytes "
            "(%s): their reads go to RocksDB from now on; raise the setting to keep them in memory",
            space.shown,
            human_bytes(self.bytes),
            doing,
            human_bytes(self.max_bytes),
        )
        space.entries, space.changes, space.dropped = None, {}, True
        return False

    def take_stats(self) -> dict[str, int]:
        """The reads the tier answered and the keys it loaded since the last take (:data:`MEMORY_COUNTERS`)."""
        with self._lock:
            counts, self._reads, self._loaded = (self._reads, self._loaded), 0, 0
        return dict(zip(MEMORY_COUNTERS, counts))

    # ------------------------------------------------------------------ the running batch's writes
    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """The batch's puts (None: delete), kept per space until :meth:`freeze` (the last put of a key wins)."""
        if not keys:
            return
        low, high = min(keys), max(keys)
        touched = [space for space in self.spaces if not space.dropped and space.begin <= high and low < space.end]
        if len(touched) == 1 and touched[0].covers(low, high):
            touched[0].changes.update(zip(keys, values))
            return
        for space in touched:  # keys of several spaces, or in and out of one: one by one
            space.changes.update((k, v) for k, v in zip(keys, values) if space.begin <= k < space.end)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """A range delete of the batch drops its puts in the range so far (a later put survives it, as in the
        write buffer); :meth:`freeze` deletes the range from the entries."""
        for space in self.spaces:
            if space.changes and space.overlaps(begin, end):
                for key in [k for k in space.changes if begin <= k < end]:
                    del space.changes[key]

    def freeze(self, range_deletes: Sequence[tuple[bytes, bytes]]) -> None:
        """The batch's version is frozen: its range deletes, then its puts and deletes, into every loaded space."""
        with self._lock:
            for space in self.spaces:
                changes, space.changes = space.changes, {}
                if space.entries is not None:
                    self._apply(space, changes, range_deletes)

    def _apply(
        self, space: HeldSpace, changes: dict[bytes, bytes | None], range_deletes: Sequence[tuple[bytes, bytes]]
    ) -> None:
        entries = space.entries
        assert entries is not None
        for begin, end in range_deletes:  # operators delete their spaces without windows by key: this is rare there
            if space.overlaps(begin, end):
                entries.delete_range(begin, end)
        if changes:
            held, added = len(entries), sum(map(len, changes)) + sum(map(len, filter(None, changes.values())))
            entries.apply(changes)
            space.entry_bytes = (space.entry_bytes * held + added) / max(1, held + len(changes))
        self._fits(space, "applying a batch")

    def clear(self) -> None:
        """Forget every held entry and the batch's changes (the state was reloaded); spaces load again when read."""
        with self._lock:
            for space in self.spaces:
                space.entries, space.changes = None, {}
