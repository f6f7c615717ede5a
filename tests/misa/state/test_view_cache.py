"""The view's layers against a model: the batch's writes over a read cache over RocksDB, per policy."""

from __future__ import annotations

import random

import pytest

from misa.runtime.batch_cache import attach_prefetcher
from misa.state.store import StateStore
from misa.state.view import StateView
from prefetch.cache import ENTRY_OVERHEAD, POLICIES, StateCache


def k(i: int) -> bytes:
    return bytes([i])


@pytest.mark.parametrize("prefetching", [False, True], ids=["reads", "prefetching"])
@pytest.mark.parametrize("policy", POLICIES)
def test_reads_see_the_batch_and_the_commit_applies_it_exactly(config, tmp_path, policy: str, prefetching: bool):
    """Random batches of reads, writes, hints and range deletes: every read is what the batch must see,
    the read cache stays within capacity and holds only current values after each batch."""
    rng = random.Random(policy + str(prefetching))
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        cache = StateCache(8 * (1 + 20 + ENTRY_OVERHEAD), policy)
        view = StateView(store, cache)
        manager = attach_prefetcher(view, 2, 4, config.cache_max_bytes) if prefetching else None
        universe = [k(i) for i in range(30)]
        model: dict[bytes, bytes] = {}  # what RocksDB holds after each commit
        for batch in range(30):
            seen: dict[bytes, bytes | None] = dict(model)  # what the batch must see
            for step in range(40):
                ts = batch * 100 + step
                op = rng.random()
                keys = rng.sample(universe, rng.randint(1, 5))
                if op < 0.4:
                    assert view.get_many(keys, ts) == [seen.get(key) for key in keys]
                elif op < 0.8:
                    values = [None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 20)) for _ in keys]
                    view.put_many(keys, values)
                    seen.update(zip(keys, values))
                elif op < 0.95:
                    if manager is not None:
                        manager.hint(keys, [ts + 50] * len(keys))
                else:
                    begin, end = sorted(rng.sample(range(31), 2))
                    view.delete_range(k(begin), k(end))
                    seen.update((k(i), None) for i in range(begin, end))
                assert cache.bytes_cached <= cache.max_bytes
            frozen = view.freeze(batch)
            frozen.hand_over()
            store.apply(frozen.buffer.changes, frozen.buffer.range_deletes)
            frozen.applied()
            model = {key: value for key, value in seen.items() if value is not None}
            assert dict(store.scan(b"", b"\xff")) == model
            assert all(model.get(key) == value for key, value in cache.items())  # held entries are current
        view.close()
