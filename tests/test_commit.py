"""Commit buffers, layered reads and the commit controller in its three modes (no Spark)."""
import threading
import time

import pytest

from checkpoint import DfsUnavailableError, failpoints
from misa.commit import CommitController
from misa.commit_buffer import CommitBuffer, StateView
from misa.state_store import StateStore
from state_helpers import contents, key


@pytest.fixture
def store(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as s:
        yield s


def batch(view: StateView, version: int, start: int, n: int) -> dict[bytes, bytes]:
    data = {key(i): f"v{version}-{i}".encode() for i in range(start, start + n)}
    view.put_many(list(data), list(data.values()))
    return data


def test_reads_see_own_writes_then_pending_buffers_then_rocksdb(store):
    view = StateView(store)
    store.write([(key(1), b"disk"), (key(2), b"disk"), (key(3), b"disk"), (key(50), b"disk")])
    pending = CommitBuffer(0, {key(2): b"pending", key(4): None}, ((key(40), key(60)),))
    view.add_pending(pending)
    view.put_many([key(3)], [b"mine"])
    assert view.get_many([key(1), key(2), key(3), key(4), key(50), key(9)]) == [
        b"disk", b"pending", b"mine", None, None, None]
    assert view.scan(key(0), key(100)) == [(key(1), b"disk"), (key(2), b"pending"), (key(3), b"mine")]
    view.delete_range(key(0), key(3))
    assert view.get_many([key(1), key(3)]) == [None, b"mine"]
    store.apply(pending.changes, pending.range_deletes)  # what the commit does before it drops the buffer
    store.write([(key(7), b"disk")])
    view.drop_pending(0)
    # key 2 is in the batch's own range delete, key 50 in the applied buffer's; key 7 comes from RocksDB
    assert view.get_many([key(2), key(50), key(7)]) == [None, None, b"disk"]


def test_a_commit_landing_during_a_scan_hides_nothing(store, monkeypatch):
    """The commit applies buffer v to RocksDB and drops it right after the scan read RocksDB: the scan
    must still see v's changes (it takes the pending buffers before it reads RocksDB)."""
    view = StateView(store)
    store.write([(key(1), b"old")])
    pending = CommitBuffer(0, {key(1): b"v0", key(2): b"v0"}, ((key(5), key(9)),))
    store.write([(key(6), b"old")])
    view.add_pending(pending)
    scan = store.scan

    def scan_then_commit_lands(begin=None, end=None):
        seen = list(scan(begin, end))
        store.apply(pending.changes, pending.range_deletes)
        view.drop_pending(0)
        return iter(seen)

    monkeypatch.setattr(store, "scan", scan_then_commit_lands)
    assert view.scan(key(0), key(10)) == [(key(1), b"v0"), (key(2), b"v0")]


@pytest.mark.parametrize("mode", ["sync", "async-ckpt", "misa"])
def test_every_mode_commits_every_version_durably(store, mode):
    view = StateView(store)
    controller = CommitController(store, view, mode)
    expected: dict[bytes, bytes] = {}
    for version in range(5):
        expected.update(batch(view, version, version * 50, 100))
        controller.commit(view.freeze(version), {"v": version})
        controller.wait_durable(version - 1)
        durable = store.checkpoints.newest_durable()
        assert version == 0 or (durable is not None and durable >= version - 1)
        assert view.get_many(list(expected)) == list(expected.values())  # batch v+1 sees version v
    controller.drain()
    assert store.checkpoints.newest_durable() == 4
    assert [r.version for r in controller.finished()] == [0, 1, 2, 3, 4]
    controller.close()
    assert contents(store) == expected


def test_misa_returns_before_the_commit_and_reads_the_commit_buffer(store):
    view = StateView(store)
    controller = CommitController(store, view, "misa")
    failpoints.configure("commit.after_apply=sleep(700)")
    data = batch(view, 0, 0, 100)
    started = time.monotonic()
    controller.commit(view.freeze(0), {})
    assert time.monotonic() - started < 0.5  # the commit runs in the background
    assert view.get_many(list(data)) == list(data.values())
    assert store.checkpoints.newest_durable() is None
    controller.wait_durable(0)
    assert store.checkpoints.newest_durable() == 0
    controller.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("point,applies", [("commit.after_apply", 2), ("ckpt.after_local_marker", 1)])
def test_a_dead_commit_thread_is_detected_and_its_work_redone(store, point, applies):
    """Dead before ack 1: redone from the commit buffer; after ack 1: only the upload is redone."""
    view = StateView(store)
    controller = CommitController(store, view, "misa")
    counter = "" if point == "commit.after_apply" else ";commit.after_apply=sleep(0)"  # counts applies
    failpoints.configure(f"{point}=raise(1){counter}")  # an unexpected error ends the commit thread
    data = batch(view, 0, 0, 200)
    controller.commit(view.freeze(0), {})
    controller.wait_durable(0)
    [record] = controller.finished()
    assert record.restarts == 1 and failpoints.hits("commit.after_apply") == applies
    assert store.checkpoints.newest_durable() == 0
    controller.close()
    assert contents(store) == data
    assert store.checkpoints.dfs.verify() == []


def test_a_silent_commit_thread_is_replaced(config, tmp_path):
    config = config.with_values(commit_heartbeat_timeout_s=0.3)
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        view = StateView(store)
        controller = CommitController(store, view, "misa")
        failpoints.configure("commit.after_apply=sleep(1500)")
        data = batch(view, 0, 0, 50)
        controller.commit(view.freeze(0), {})
        time.sleep(0.1)
        failpoints.configure("")  # the replacement does not sleep
        controller.wait_durable(0)
        assert controller.finished()[0].restarts == 1
        time.sleep(1.6)  # the replaced thread wakes up and must leave everything alone
        assert [t.name for t in threading.enumerate()].count("misa-apply") == 1
        controller.close()
        assert contents(store) == data and store.checkpoints.newest_durable() == 0


def test_transient_dfs_errors_do_not_fail_the_commit(store):
    view = StateView(store)
    controller = CommitController(store, view, "misa")
    failpoints.configure("dfs.put=raise(2)")
    batch(view, 0, 0, 100)
    controller.commit(view.freeze(0), {})
    controller.wait_durable(0)
    assert store.checkpoints.newest_durable() == 0
    controller.close()


@pytest.mark.parametrize("mode", ["sync", "misa"])
def test_a_dfs_that_stays_down_fails_with_a_clear_error(store, mode):
    view = StateView(store)
    controller = CommitController(store, view, mode)
    batch(view, 0, 0, 100)
    controller.commit(view.freeze(0), {})
    controller.wait_durable(0)
    failpoints.configure("dfs.put=raise")
    batch(view, 1, 100, 100)
    with pytest.raises(DfsUnavailableError, match="failed after 3 attempts"):
        controller.commit(view.freeze(1), {})
        controller.wait_durable(1)
    assert store.checkpoints.newest_durable() == 0
    controller.close()
