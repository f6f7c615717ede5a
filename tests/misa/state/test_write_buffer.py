"""The batch's write buffer, the read cache chosen by the configuration, and prefetching switched on and off."""

import dataclasses

import pytest

from common.cache_contract import MISSING, Marker, ReadCache
from misa.config import MisaConfig
from misa.exceptions import ConfigError
from misa.runtime.batch_cache import attach_prefetcher, new_cache
from misa.state.store import StateStore
from misa.state.view import StateView
from misa.state.write_buffer import WriteBuffer
from prefetch.cache import StateCache


def k(i: int) -> bytes:
    return i.to_bytes(8, "big")


def test_writes_range_deletes_and_drain():
    buffer = WriteBuffer()
    buffer.put_many([k(1), k(2), k(3)], [b"a", b"b", None])
    buffer.delete_range(k(2), k(5))  # drops the puts of 2 and 3
    buffer.put_many([k(4)], [b"after"])  # a put after the range delete survives it
    buffer.delete_range(k(7), k(7))  # empty: nothing
    assert buffer.get_many([k(1), k(2), k(3), k(4), k(9)]) == [b"a", None, None, b"after", MISSING]
    assert sorted(buffer.items(k(0), k(10))) == [(k(1), b"a"), (k(4), b"after")]
    assert buffer.deleted_ranges == [(k(2), k(5))]
    changes, ranges = buffer.drain()
    assert changes == {k(1): b"a", k(4): b"after"} and ranges == [(k(2), k(5))]
    assert buffer.deleted_ranges == [] and buffer.drain() == ({}, [])
    with pytest.raises(ValueError, match="values"):
        buffer.put_many([k(1), k(2)], [b"a"])


def test_the_write_buffer_counts_hits_and_misses():
    buffer = WriteBuffer()
    assert buffer.get_many([k(1)]) == [MISSING]
    buffer.put_many([k(2)], [b"mine"])
    assert buffer.get_many([k(1), k(2)]) == [MISSING, b"mine"]
    assert buffer.stats.take() == {**buffer.stats.as_dict(), "hits": 1, "misses": 2} and len(buffer) == 1
    buffer.clear()
    assert buffer.get_many([k(2)]) == [MISSING]


def test_auto_is_the_tac_with_prefetching_and_no_read_cache_without():
    assert new_cache(MisaConfig()) is None
    with_prefetch = MisaConfig.from_mapping({"spark.misa.prefetch.enabled": "true"})
    assert with_prefetch.effective_cache_policy == "tac" and isinstance(new_cache(with_prefetch), StateCache)
    lru = MisaConfig.from_mapping({"spark.misa.cache.policy": "lru"})
    assert isinstance(new_cache(lru), StateCache) and new_cache(lru).policy == "lru"


def test_prefetching_auto_starts_without_a_read_cache_and_prefetches_into_a_tac():
    auto = MisaConfig()
    assert auto.prefetch_mode == "auto" and new_cache(auto) is None
    assert auto.cache_policy_for(True) == "tac" and auto.cache_policy_for(False) == "none"
    assert MisaConfig.from_mapping({"spark.misa.prefetch.enabled": " TRUE "}).prefetch_mode == "true"


def test_prefetching_without_a_cache_is_refused_naming_both_keys_and_auto_stays_off():
    with pytest.raises(ConfigError, match="spark.misa.prefetch.enabled=true.*spark.misa.cache.policy"):
        MisaConfig.from_mapping({"spark.misa.prefetch.enabled": "true", "spark.misa.cache.policy": "none"})
    for mode in ("false", "auto"):  # auto, the default, has nothing to prefetch into: off
        off = MisaConfig.from_mapping({"spark.misa.prefetch.enabled": mode, "spark.misa.cache.policy": "none"})
        assert off.prefetching == "false" and new_cache(off) is None


def _batch(view: StateView, store: StateStore, version: int, value: bytes) -> None:
    """A batch that writes ``value`` to key 1, committed straight into RocksDB."""
    view.put_many([k(1)], [value])
    frozen = view.freeze(version)
    frozen.hand_over()
    store.write(frozen.buffer.changes.items())
    frozen.applied()


def test_turning_prefetching_off_and_on_never_serves_a_value_written_around_the_cache(config, tmp_path):
    """While prefetching is off, batches do not refresh prefetching's own TAC, so it is emptied when
    prefetching goes off: back on, a read sees the newest value."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        store.write([(k(1), b"disk")])
        view = StateView(store)
        manager = attach_prefetcher(view, 2, 16, config.cache_max_bytes, active=False)
        assert view.cache is None and view.read_cache is None and view.prefetcher is None
        view.set_prefetching(True)
        assert view.prefetcher is manager and view.read_cache is manager.cache and manager.cache.policy == "tac"
        manager.hint([k(1)], [5])
        assert view.get_many([k(1)], 5) == [b"disk"]
        _batch(view, store, 1, b"v1")
        assert manager.cache.get_many([k(1)]) == [b"v1"]  # refreshed with the batch's write
        view.set_prefetching(False)
        assert view.read_cache is None and len(manager.cache) == 0
        _batch(view, store, 2, b"v2")
        view.set_prefetching(True)
        assert view.get_many([k(1)], 7) == [b"v2"]
        view.close()


def test_a_configured_cache_serves_reads_with_prefetching_on_and_off(config, tmp_path):
    lru = dataclasses.replace(config, cache_policy="lru")
    with StateStore(lru, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        view = StateView(store, new_cache(lru))
        cache = view.cache
        attach_prefetcher(view, 2, 16, lru.cache_max_bytes, active=False)
        _batch(view, store, 1, b"v1")
        view.set_prefetching(True)
        assert view.read_cache is cache and view.get_many([k(1)]) == [b"v1"]
        view.set_prefetching(False)
        assert view.read_cache is cache and len(cache) == 1  # kept warm: refreshed by every batch
        view.close()


def test_the_state_cache_implements_the_read_cache_contract():
    """Every member the contract declares exists on StateCache; MISSING is one enum member."""
    declared = {name for name in vars(ReadCache) if not name.startswith("_")} | set(ReadCache.__annotations__)
    assert declared <= set(dir(StateCache(1 << 20, "tac"))), declared - set(dir(StateCache(1 << 20, "tac")))
    assert MISSING is Marker.MISSING and repr(MISSING) == "MISSING" and MISSING is not None


def test_the_state_package_does_not_import_the_prefetch_package():
    import ast
    from pathlib import Path

    import misa.state

    for path in Path(misa.state.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "prefetch" or n.startswith("prefetch.") for n in names), path
