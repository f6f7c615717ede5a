"""The batch's view of the state (StateView): its writes and read cache, then frozen versions' buffers newest
first, then RocksDB.

Real RocksDB (a StateStore on tmp_path), real caches and commit buffers; no Spark.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from state_helpers import key, pending_version

from misa.runtime.batch_cache import attach_prefetcher
from misa.state.store import StateStore
from misa.state.version import BatchVersion
from misa.state.view import StateReads, StateView
from prefetch.cache import StateCache


@pytest.fixture
def store(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as s:
        s.write([(key(i), b"disk") for i in range(1, 10)])
        yield s


@pytest.fixture(params=["write-buffer", "tac"])
def view(request, store):
    """A view over ``store`` with only its write buffer, or a TAC read cache too."""
    v = StateView(store, None if request.param == "write-buffer" else StateCache(1 << 20, "tac"))
    yield v
    v.close()


def drop(frozen: BatchVersion) -> None:
    """The version is applied (as if RocksDB had it): reads stop consulting its buffer."""
    frozen.applied()


def test_reads_take_the_cache_then_the_newest_pending_buffer_that_decides_then_rocksdb(view):
    pending_version(view, 0, {key(2): b"v0", key(3): b"v0", key(4): b"v0", key(6): b"v0"})
    # v1: a range delete hides v0's key 6 and RocksDB's key 7; its own put of 7 survives its range delete
    pending_version(view, 1, {key(3): b"v1", key(4): None, key(7): b"v1"}, (key(6), key(8)))
    view.put_many([key(2), key(5)], [b"mine", None])
    got = view.get_many([key(i) for i in range(1, 11)])
    assert got == [b"disk", b"mine", b"v1", None, None, None, b"v1", b"disk", b"disk", None]


def test_fetch_below_skips_the_cache_and_dropping_a_buffer_uncovers_the_one_below(view):
    v0 = pending_version(view, 0, {key(1): b"v0"})
    v1 = pending_version(view, 1, {key(1): b"v1"})
    view.put_many([key(1)], [b"mine"])
    for parallel in (True, False):
        assert view.fetch_below([key(1), key(2), key(42)], parallel) == [b"v1", b"disk", None]
    drop(v1)
    assert view.fetch_below([key(1)]) == [b"v0"]
    drop(v0)
    assert view.fetch_below([key(1)]) == [b"disk"]
    assert view.get_many([key(1)]) == [b"mine"]  # the batch's own write still comes first


def test_a_state_cache_keeps_what_it_read_and_a_write_buffer_reads_below_every_time(view, store):
    assert view.get_many([key(1), key(42)], ts=[5, 6]) == [b"disk", None]
    store.write([(key(1), b"changed under the view"), (key(42), b"new")])
    cached = isinstance(view.cache, StateCache)
    expected = [b"disk", None] if cached else [b"changed under the view", b"new"]
    assert view.get_many([key(1), key(42)]) == expected


def test_scan_merges_rocksdb_the_buffers_oldest_first_and_the_batch_in_key_order(view, store):
    store.write([(key(20), b"disk")])  # past the scanned range
    pending_version(view, 0, {key(3): b"v0", key(11): b"v0", key(20): b"v0"}, (key(1), key(3)))
    pending_version(view, 1, {key(4): None, key(12): b"v1"}, (key(11), key(12)))
    view.delete_range(key(6), key(8))
    view.put_many([key(7), key(9), key(13)], [b"mine", None, b"mine"])
    assert view.scan(key(0), key(15)) == [
        (key(3), b"v0"),
        (key(5), b"disk"),
        (key(7), b"mine"),
        (key(8), b"disk"),
        (key(12), b"v1"),
        (key(13), b"mine"),
    ]
    assert view.scan(key(7), key(9)) == [(key(7), b"mine"), (key(8), b"disk")]
    assert view.scan(key(30), key(40)) == []


def test_a_range_delete_hides_rocksdb_and_the_buffers_until_a_later_put(view):
    pending_version(view, 0, {key(3): b"v0"})
    view.delete_range(key(2), key(5))
    view.put_many([key(4)], [b"after"])
    assert view.get_many([key(1), key(2), key(3), key(4), key(5)]) == [b"disk", None, None, b"after", b"disk"]
    assert view.scan(key(0), key(6)) == [(key(1), b"disk"), (key(4), b"after"), (key(5), b"disk")]


def test_freeze_drains_the_batch_into_its_versions_commit_buffer(view):
    view.delete_range(key(5), key(7))
    view.put_many([key(1), key(2), key(6)], [b"one", None, b"six"])
    frozen = view.freeze(3).buffer
    assert (frozen.version, frozen.changes, frozen.range_deletes) == (
        3,
        {key(1): b"one", key(2): None, key(6): b"six"},
        ((key(5), key(7)),),
    )
    assert len(frozen) == 4
    assert view.get_many([key(1), key(2), key(5), key(6)]) == [b"one", None, None, b"six"]  # registered by freeze
    assert view.freeze(4).buffer.changes == {} and view.freeze(5).buffer.range_deletes == ()


def test_reset_forgets_the_batch_and_the_pending_buffers(view):
    pending_version(view, 0, {key(1): b"v0"})
    view.put_many([key(2)], [b"mine"])
    view.delete_range(key(3), key(4))
    view.reset()
    assert view.get_many([key(1), key(2), key(3)]) == [b"disk", b"disk", b"disk"]
    assert view.freeze(1).buffer.changes == {}


def test_read_time_and_device_bytes_add_up_over_reads_and_are_reset_when_taken(store, monkeypatch):
    clock, device = iter([10.0, 10.25, 11.0, 11.5]), iter([1000, 5096, 5096, 9192])
    monkeypatch.setattr("misa.state.view.time", SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr("misa.state.view.device_bytes_read", lambda: next(device))
    view = StateView(store)
    view.get_many([key(1)])
    view.get_many([key(2), key(3)])
    assert view.take_reads() == StateReads(0.75, 8192)
    assert view.take_reads() == StateReads(0.0, 0)


def test_device_bytes_are_unknown_where_the_system_does_not_account_them(store, monkeypatch):
    monkeypatch.setattr("misa.state.view.device_bytes_read", lambda: None)
    view = StateView(store)
    view.get_many([key(1)])
    assert view.take_reads().device_bytes is None


def test_with_prefetching_reads_still_see_the_pending_buffers_and_the_batchs_writes(store):
    view = StateView(store)
    manager = attach_prefetcher(view, 2, 4, 1 << 20)
    try:
        pending_version(view, 0, {key(1): b"v0", key(2): None})
        manager.hint([key(i) for i in range(1, 6)], [1] * 5)
        manager.quiesce()
        view.put_many([key(3)], [b"mine"])
        assert view.get_many([key(1), key(2), key(3), key(4), key(42)]) == [b"v0", None, b"mine", b"disk", None]
        frozen = view.freeze(1).buffer
        assert frozen.changes == {key(3): b"mine"}  # only the batch's write, not what was prefetched
    finally:
        view.close()
