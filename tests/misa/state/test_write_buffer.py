"""The write buffer (cache policy none): the state cache's write and delete semantics without a read cache."""

import pytest

from misa.config import ConfigError, MisaConfig
from misa.state.view import new_cache
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


def test_prefetching_without_a_cache_is_refused_naming_both_keys():
    with pytest.raises(ConfigError, match="spark.misa.prefetch.enabled=true.*spark.misa.cache.policy"):
        MisaConfig.from_mapping({"spark.misa.prefetch.enabled": "true", "spark.misa.cache.policy": "none"})
