"""The memory tier (:mod:`misa.state.memory_tier`) against the reads it replaces (pending commit buffers, then RocksDB).

Random operations run on two views over two real stores, one with a memory tier holding a key space, one without:
puts and deletes in and out of the space, range deletes (some across it), versions frozen and applied to RocksDB
later (so reads and the tier's loads meet pending buffers), reloads, a budget that drops the space mid-run. Every read
must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from misa.runtime.batch_cache import new_view
from misa.state.held_entries import FlatEntries, WindowedEntries
from misa.state.memory_tier import LOAD_CHUNK, MemorySpace, MemoryTier
from misa.state.store import StateStore
from misa.state.version import BatchVersion
from misa.state.view import StateView

SPACE = (b"m", b"n")  # the held key space: keys starting with b"m"


def _key(rng: np.random.Generator, inside: bool) -> bytes:
    tail = bytes(rng.choice([0, 1, 0x6D, 0x7F, 0xFE, 0xFF], size=int(rng.integers(0, 4))).tolist())
    first = b"m" if inside else bytes([int(rng.choice([0x00, 0x61, 0x6C, 0x6E, 0xFF]))])
    return first + tail


class _Pair:
    """The same operations on a view with a memory tier and on one without."""

    def __init__(self, config, root, max_bytes: int, window_bytes: int):
        self.stores = [StateStore(config, root / name, f"file://{root / name}-dfs") for name in ("tier", "plain")]
        self.tiered = StateView(self.stores[0], memory=MemoryTier([MemorySpace(*SPACE, window_bytes)], max_bytes))
        self.views = [self.tiered, StateView(self.stores[1])]
        self.pending: list[list[BatchVersion]] = [[], []]
        self.version = 0

    def do(self, call: str, *args):
        results = [getattr(view, call)(*args) for view in self.views]
        assert results[0] == results[1], f"{call}{args}"
        return results[0]

    def freeze(self) -> None:
        self.version += 1
        for view, pending in zip(self.views, self.pending):
            frozen = view.freeze(self.version)
            frozen.hand_over()  # to a commit that has not applied it yet
            pending.append(frozen)

    def apply_oldest(self) -> None:
        """RocksDB gets the oldest pending version (as the commit thread would); reads stop consulting its buffer."""
        for store, pending in zip(self.stores, self.pending):
            if pending:
                frozen = pending.pop(0)
                store.apply(frozen.buffer.changes, frozen.buffer.range_deletes)
                frozen.applied()

    def reload(self) -> None:
        """Every version applied, then the views forget what they hold (a reload of the same state)."""
        while self.pending[0]:
            self.apply_oldest()
        for view in self.views:
            view.reset()

    def close(self) -> None:
        for view, store in zip(self.views, self.stores):
            view.close()
            store.close()


@pytest.mark.parametrize(
    "seed,max_bytes,window_bytes",
    [(1, 1 << 30, 0), (2, 1 << 30, 0), (3, 1 << 30, 2), (4, 3_000, 0), (5, 1 << 30, 2), (6, 3_000, 2)],
)
def test_reads_through_the_memory_tier_equal_the_reads_below_it(config, tmp_path, seed, max_bytes, window_bytes):
    """``window_bytes`` 2: the space is held per window (``b"m"`` and one byte), and some range deletes drop whole
    windows, as a watermark does."""
    rng = np.random.default_rng(seed)
    pair = _Pair(config, tmp_path, max_bytes, window_bytes)
    try:
        pair.stores[0].write([(_key(rng, True), b"old") for _ in range(20)])  # a state before the first read
        pair.stores[1].write([(k, b"old") for k, _ in pair.stores[0].items()])
        held_reads = 0
        for step in range(400):
            op = rng.integers(0, 10)
            if op < 3:
                keys = [_key(rng, rng.random() < 0.8) for _ in range(int(rng.integers(1, 8)))]
                values = [None if rng.random() < 0.3 else f"v{step}".encode() for _ in keys]
                pair.do("put_many", keys, values)
            elif op == 3 and rng.random() < 0.3:
                begin, end = sorted([_key(rng, rng.random() < 0.7), _key(rng, rng.random() < 0.7)])
                if window_bytes and rng.random() < 0.5:  # whole windows: [m, m + a window's byte)
                    begin, end = b"m", b"m" + bytes([int(rng.choice([1, 0x6D, 0x7F, 0xFE]))])
                pair.do("delete_range", begin, end)
            elif op < 6:
                pair.do("get_many", [_key(rng, True) for _ in range(int(rng.integers(1, 10)))])
                held_reads += pair.tiered.memory.take_stats()["memory_reads"]
            elif op == 6:
                pair.do("get_many", [_key(rng, rng.random() < 0.5) for _ in range(int(rng.integers(1, 10)))])
            elif op == 7:
                pair.do("scan", b"l", b"o")
            elif op == 8:
                pair.freeze()
                if rng.random() < 0.5:
                    pair.apply_oldest()
                if rng.random() < 0.3:  # the tier loads again at its next read, with versions still pending
                    pair.tiered.memory.clear()
            elif rng.random() < 0.1:
                pair.reload()
        assert pair.do("scan", b"", b"\xff" * 8)  # the run kept some state
        if max_bytes > 1 << 20:
            assert held_reads > 100, "the tier answered too few reads for the test to mean anything"
        else:  # the small budget dropped the space: its reads went below the tier, and still agreed
            assert pair.tiered.memory.spaces[0].dropped
    finally:
        pair.close()


def _operators() -> dict[str, tuple[object, list[int] | None]]:
    """Operators by name, with the ``window_bytes`` of each space they hold (None: no memory tier)."""
    from misa.operators.aggregation import Agg, Aggregation
    from misa.operators.dedup import Deduplicate
    from misa.operators.interval_join import IntervalJoin
    from misa.operators.keyed import KeyedJoin
    from misa.operators.lookup_aggregation import LookupAggregation

    count = [Agg("n", "count", "*")]
    tumbling = Aggregation(["k"], count, window="10 seconds", event_time="t", watermark_delay="1s")
    return {
        "dropDuplicatesWithinWatermark": (
            Deduplicate(["k"], event_time="t", watermark_delay="2s", within_watermark=True),
            [0],
        ),
        "dropDuplicates by event time": (Deduplicate(["k", "t"], event_time="t", watermark_delay="2s"), None),
        "tumbling windows": (tumbling, [8]),
        "sliding windows": (
            Aggregation(["k"], count, window="10 seconds", slide="2 seconds", event_time="t", watermark_delay="1s"),
            None,
        ),
        "no window": (Aggregation(["k"], count), None),
        "interval join": (IntervalJoin(["k"], event_time="t", payload=["v"]), [8]),
        "keyed join": (KeyedJoin("bid", "auction", "auction", "id", ("category", 10)), [0]),
        "keyed join, every right row": (
            KeyedJoin("bid", "auction", "auction", "id", ("category", 10), unique_right=False),
            None,
        ),
        "lookup aggregation": (LookupAggregation("ad", tumbling, lambda keys: ["c"] * len(keys)), [0, 8]),
    }


@pytest.mark.parametrize("name", list(_operators()))
def test_operators_hold_the_spaces_they_name_and_zero_turns_the_tier_off(config, tmp_path, name):
    operator, window_bytes = _operators()[name]
    with StateStore(config, tmp_path / "s", f"file://{tmp_path / 'dfs'}") as store:
        memory = new_view(store, config, operator).memory
        if window_bytes is None:
            assert memory is None
        else:
            assert memory is not None and sorted(s.window_bytes for s in memory.spaces) == window_bytes
            assert new_view(store, config.with_values(memory_tier_max_bytes=0), operator).memory is None


def test_a_space_over_the_budget_is_dropped_with_a_warning_naming_the_setting(config, tmp_path, caplog):
    with StateStore(config, tmp_path / "s", f"file://{tmp_path / 'dfs'}") as store:
        store.write([(b"m" + bytes([i]), b"x" * 100) for i in range(50)])
        view = StateView(store, memory=MemoryTier([SPACE], 2_000))
        assert view.get_many([b"m\x01", b"m\x99"]) == [b"x" * 100, None]
        assert view.memory.spaces[0].dropped and view.memory.take_stats()["memory_reads"] == 0
        assert "spark.misa.state.memoryTier.maxBytes" in caplog.text


def test_a_load_past_the_budget_stops_reading_at_the_first_chunk_over_it():
    pulled = 0

    def load(begin: bytes, end: bytes):
        nonlocal pulled
        for i in range(1_000_000):
            pulled += 1
            yield b"m" + i.to_bytes(4, "big"), b"x" * 100

    tier = MemoryTier([SPACE], max_bytes=1 << 20)  # about 4,500 entries of 225 bytes
    assert tier.get_many([b"m\x00\x00\x00\x01"], load) is None
    assert tier.spaces[0].dropped and tier.bytes == 0
    assert pulled <= 2 * LOAD_CHUNK  # not the million


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_entries_per_window_equal_entries_in_one_dict(seed):
    """The windowed store against the flat one it stands in for: loads, puts, deletes, range deletes whole and
    cutting windows, reads of keys in many windows and in one."""
    rng = np.random.default_rng(seed)

    def key() -> bytes:
        return bytes([int(rng.integers(0, 12))]) + bytes(rng.integers(0, 256, size=int(rng.integers(0, 3))).tolist())

    flat, windowed = FlatEntries(), WindowedEntries(1)
    loaded = [(key(), bytes(rng.integers(0, 3, size=3).tolist())) for _ in range(300)]  # trailing zero bytes too
    for entries in (flat, windowed):
        entries.add(loaded)
    found, most_windows = 0, 0
    for step in range(300):
        op = rng.integers(0, 4)
        if op == 0:
            changes = {key(): (None if rng.random() < 0.3 else f"v{step}\x00".encode()) for _ in range(20)}
            flat.apply(changes)
            windowed.apply(changes)
        elif op == 1:
            begin, end = sorted([key(), key()])
            if rng.random() < 0.5:
                begin, end = bytes([int(rng.integers(0, 12))]), bytes([int(rng.integers(0, 13))])
            flat.delete_range(begin, end)
            windowed.delete_range(begin, end)
        else:
            keys = [key() for _ in range(int(rng.integers(1, 40)))]
            if op == 3:
                keys = [keys[0][:1] + k[1:] for k in keys]  # one window
            values = windowed.get_many(keys)
            assert values == flat.get_many(keys)
            found += sum(value is not None for value in values)
        assert len(windowed) == len(flat)
        most_windows = max(most_windows, len(windowed.windows))
    assert found > 50 and most_windows > 3, "too few keys held for the test to mean anything"


def test_a_reset_loads_the_tier_in_the_background_before_the_first_read(config, tmp_path):
    with StateStore(config, tmp_path / "s", f"file://{tmp_path / 'dfs'}") as store:
        store.write([(b"m" + bytes([i]), bytes([i])) for i in range(100)] + [(b"z", b"outside")])
        view = StateView(store, memory=MemoryTier([SPACE], 1 << 30))
        view.reset()  # as after recovery loaded the store
        view.memory.wait()
        assert view.memory.take_stats() == {"memory_reads": 0, "memory_loaded": 100}
        assert view.get_many([b"m\x05", b"m\xff"]) == [b"\x05", None]
        assert view.memory.take_stats() == {"memory_reads": 2, "memory_loaded": 0}  # held: no second load
        view.close()


def test_a_load_that_fails_holds_nothing_and_the_next_read_loads_again():
    def failing(begin: bytes, end: bytes):
        for i in range(LOAD_CHUNK + 10):  # past one chunk, so that part of the space was added
            yield b"m" + i.to_bytes(4, "big"), b"v"
        raise OSError("disk gone")

    def working(begin: bytes, end: bytes):
        yield from ((b"m" + i.to_bytes(4, "big"), b"v") for i in range(LOAD_CHUNK + 20))

    tier = MemoryTier([SPACE], 1 << 30)
    tier.start_loading(failing)
    tier.wait()
    assert tier.spaces[0].entries is None and not tier.spaces[0].dropped
    last = b"m" + (LOAD_CHUNK + 15).to_bytes(4, "big")  # a key the failed load never reached
    assert tier.get_many([last], working) == [b"v"]
    with pytest.raises(OSError, match="disk gone"):  # the batch's own load meets the error
        MemoryTier([SPACE], 1 << 30).get_many([last], failing)
