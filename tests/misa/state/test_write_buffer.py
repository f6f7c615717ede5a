"""The write buffer (cache policy none): the state cache's write and delete semantics without a read cache."""

import dataclasses

import pytest

from misa.config import ConfigError, MisaConfig
from misa.state.store import StateStore
from misa.state.view import StateView, new_cache
from misa.state.write_buffer import WriteBuffer
from prefetch.cache import MISSING, StateCache


def k(i: int) -> bytes:
    return i.to_bytes(8, "big")


@pytest.mark.parametrize("make", [WriteBuffer, lambda: StateCache(1 << 20, "tac")], ids=["none", "tac"])
def test_writes_range_deletes_and_drain_behave_like_the_state_cache(make):
    buffer = make()
    buffer.put_many([k(1), k(2), k(3)], [b"a", b"b", None])
    buffer.delete_range(k(2), k(5))  # drops the puts of 2 and 3
    buffer.put_many([k(4)], [b"after"])  # a put after the range delete survives it
    assert buffer.get_many([k(1), k(2), k(3), k(4), k(9)]) == [b"a", None, None, b"after", MISSING]
    assert sorted(buffer.items(k(0), k(10))) == [(k(1), b"a"), (k(4), b"after")]
    assert buffer.deleted_ranges == [(k(2), k(5))]
    changes, ranges = buffer.drain()
    assert changes == {k(1): b"a", k(4): b"after"} and ranges == [(k(2), k(5))]
    assert buffer.deleted_ranges == [] and buffer.drain() == ({}, [])


def test_the_write_buffer_caches_no_read_and_counts_hits_and_misses():
    buffer = WriteBuffer()
    assert buffer.fill([k(1)], [b"disk"], 0) == 0 and buffer.get_many([k(1)]) == [MISSING]
    buffer.put_many([k(2)], [b"mine"])
    assert buffer.get_many([k(1), k(2)]) == [MISSING, b"mine"]
    assert buffer.stats.take()["hits"] == 1 and len(buffer) == 1
    buffer.clear()
    assert buffer.get_many([k(2)]) == [MISSING]


def test_auto_is_the_tac_with_prefetching_and_a_write_buffer_without():
    assert isinstance(new_cache(MisaConfig()), WriteBuffer)
    with_prefetch = MisaConfig.from_mapping({"spark.misa.prefetch.enabled": "true"})
    assert with_prefetch.effective_cache_policy == "tac" and isinstance(new_cache(with_prefetch), StateCache)
    lru = MisaConfig.from_mapping({"spark.misa.cache.policy": "lru"})
    assert isinstance(new_cache(lru), StateCache) and new_cache(lru).policy == "lru"


def test_prefetching_auto_starts_with_the_write_buffer_and_prefetches_into_a_tac():
    auto = MisaConfig()
    assert auto.prefetch_mode == "auto" and isinstance(new_cache(auto), WriteBuffer)
    assert auto.cache_policy_for(True) == "tac" and auto.cache_policy_for(False) == "none"
    assert MisaConfig.from_mapping({"spark.misa.prefetch.enabled": " TRUE "}).prefetch_mode == "true"


def test_prefetching_without_a_cache_is_refused_naming_both_keys_and_auto_stays_off():
    with pytest.raises(ConfigError, match="spark.misa.prefetch.enabled=true.*spark.misa.cache.policy"):
        MisaConfig.from_mapping({"spark.misa.prefetch.enabled": "true", "spark.misa.cache.policy": "none"})
    for mode in ("false", "auto"):  # auto, the default, has nothing to prefetch into: off
        off = MisaConfig.from_mapping({"spark.misa.prefetch.enabled": mode, "spark.misa.cache.policy": "none"})
        assert off.prefetching == "false" and isinstance(new_cache(off), WriteBuffer)


def _batch(view: StateView, store: StateStore, version: int, value: bytes) -> None:
    """A batch that writes ``value`` to key 1, committed straight into RocksDB."""
    view.put_many([k(1)], [value])
    frozen = view.freeze(version)
    frozen.hand_over()
    store.write(frozen.buffer.changes.items())
    frozen.applied()


def test_turning_prefetching_off_and_on_never_serves_a_value_written_around_the_cache(config, tmp_path):
    """While prefetching is off, batches write through the write buffer around prefetching's TAC, so
    the TAC is emptied when prefetching goes off: back on, a read sees the newest value."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        store.write([(k(1), b"disk")])
        view = StateView(store)
        manager = view.enable_prefetch(2, 16, config.cache_max_bytes, active=False)
        assert isinstance(view.cache, WriteBuffer) and view.prefetcher is None
        view.set_prefetching(True)
        assert view.prefetcher is manager and view.cache is manager.cache and manager.cache.policy == "tac"
        manager.hint([k(1)], [5])
        assert view.get_many([k(1)], 5) == [b"disk"]
        _batch(view, store, 1, b"v1")
        assert manager.cache.get_many([k(1)]) == [b"v1"]  # cached, clean
        view.set_prefetching(False)
        assert isinstance(view.cache, WriteBuffer) and len(manager.cache) == 0
        _batch(view, store, 2, b"v2")
        view.set_prefetching(True)
        assert view.get_many([k(1)], 7) == [b"v2"]
        view.close()


def test_a_configured_cache_serves_reads_with_prefetching_on_and_off(config, tmp_path):
    lru = dataclasses.replace(config, cache_policy="lru")
    with StateStore(lru, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        view = StateView(store, new_cache(lru))
        cache = view.cache
        view.enable_prefetch(2, 16, lru.cache_max_bytes, active=False)
        _batch(view, store, 1, b"v1")
        view.set_prefetching(True)
        assert view.cache is cache and view.get_many([k(1)]) == [b"v1"]
        view.set_prefetching(False)
        assert view.cache is cache and len(cache) == 1  # kept warm: every write goes through it
        view.close()
