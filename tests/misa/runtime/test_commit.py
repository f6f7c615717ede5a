"""Commit buffers, layered reads and the commit controller in its three modes (no Spark)."""

import threading
import time
from typing import Callable

import pytest
from state_helpers import contents, key, pending_version

from checkpoint.exceptions import DfsUnavailableError
from common import failpoints
from common.errors import FailpointError
from misa.exceptions import CommitFailedError
from misa.runtime.commit import CommitController
from misa.state.store import StateStore
from misa.state.view import StateView

MODES = ["sync", "async-ckpt", "misa"]


@pytest.fixture
def store(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as s:
        yield s


@pytest.fixture
def hooks(monkeypatch) -> dict[str, Callable[[], None]]:
    """``hooks[name] = fn`` runs ``fn`` in the thread that reaches failpoint ``name``, before the failpoint
    itself: deterministic interleavings of commit threads, without sleeps."""
    hooks: dict[str, Callable[[], None]] = {}
    real = failpoints.hit

    def hit(name: str) -> None:
        if name in hooks:
            hooks[name]()
        real(name)

    monkeypatch.setattr(failpoints, "hit", hit)
    return hooks


def first_time(fn: Callable[[], None]) -> Callable[[], None]:
    """A hook that runs ``fn`` at the first hit only."""
    once = threading.Lock()

    def hook() -> None:
        if once.acquire(blocking=False):
            fn()

    return hook


def worker_thread(controller: CommitController, stage: str) -> threading.Thread:
    thread = controller._workers[stage].thread
    assert thread is not None
    return thread


def batch(view: StateView, version: int, start: int, n: int) -> dict[bytes, bytes]:
    data = {key(i): f"v{version}-{i}".encode() for i in range(start, start + n)}
    view.put_many(list(data), list(data.values()))
    return data


def test_reads_see_own_writes_then_pending_buffers_then_rocksdb(store):
    view = StateView(store)
    store.write([(key(1), b"disk"), (key(2), b"disk"), (key(3), b"disk"), (key(50), b"disk")])
    pending = pending_version(view, 0, {key(2): b"pending", key(4): None}, (key(40), key(60)))
    view.put_many([key(3)], [b"mine"])
    assert view.get_many([key(1), key(2), key(3), key(4), key(50), key(9)]) == [
        b"disk",
        b"pending",
        b"mine",
        None,
        None,
        None,
    ]
    assert view.scan(key(0), key(100)) == [(key(1), b"disk"), (key(2), b"pending"), (key(3), b"mine")]
    view.delete_range(key(0), key(3))
    assert view.get_many([key(1), key(3)]) == [None, b"mine"]
    store.apply(pending.buffer.changes, pending.buffer.range_deletes)  # what the commit does before applied
    store.write([(key(7), b"disk")])
    pending.applied()  # the view stops reading its buffer
    # key 2 is in the batch's own range delete, key 50 in the applied buffer's; key 7 comes from RocksDB
    assert view.get_many([key(2), key(50), key(7)]) == [None, None, b"disk"]


def test_a_commit_landing_during_a_scan_hides_nothing(store, monkeypatch):
    """The commit applies buffer v to RocksDB and drops it right after the scan read RocksDB: the scan
    must still see v's changes (it takes the pending buffers before it reads RocksDB)."""
    view = StateView(store)
    store.write([(key(1), b"old")])
    pending = pending_version(view, 0, {key(1): b"v0", key(2): b"v0"}, (key(5), key(9)))
    store.write([(key(6), b"old")])
    scan = store.scan

    def scan_then_commit_lands(begin=None, end=None):
        seen = list(scan(begin, end))
        store.apply(pending.buffer.changes, pending.buffer.range_deletes)
        pending.applied()
        return iter(seen)

    monkeypatch.setattr(store, "scan", scan_then_commit_lands)
    assert view.scan(key(0), key(10)) == [(key(1), b"v0"), (key(2), b"v0")]


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_commits_every_version_durably(store, mode):
    view = StateView(store)
    controller = CommitController(store, mode)
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
    controller = CommitController(store, "misa")
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


@pytest.mark.parametrize("point,applies", [("commit.after_apply", 2), ("ckpt.after_local_marker", 1)])
def test_a_dead_commit_thread_is_detected_and_its_work_redone(store, point, applies):
    """Dead before ack 1: redone from the commit buffer; after ack 1: only the upload is redone."""
    view = StateView(store)
    controller = CommitController(store, "misa")
    counter = "" if point == "commit.after_apply" else ";commit.after_apply=sleep(0)"  # counts applies
    failpoints.configure(f"{point}=raise(1){counter}")  # an unexpected error ends the commit thread
    data = batch(view, 0, 0, 200)
    controller.commit(view.freeze(0), {})
    controller.drain()  # durable, and the retention after it ran: the record is complete
    [record] = controller.finished()
    assert record.restarts == 1 and failpoints.hits("commit.after_apply") == applies
    assert store.checkpoints.newest_durable() == 0
    controller.close()
    assert contents(store) == data
    assert store.checkpoints.dfs.verify() == []


def test_a_silent_commit_thread_is_replaced(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        view = StateView(store)
        controller = CommitController(store, "misa", heartbeat_timeout_s=0.3)
        failpoints.configure("commit.after_apply=sleep(1500)")
        data = batch(view, 0, 0, 50)
        controller.commit(view.freeze(0), {})
        time.sleep(0.1)
        failpoints.configure("")  # the replacement does not sleep
        controller.drain()
        assert controller.finished()[0].restarts == 1
        time.sleep(1.6)  # the replaced thread wakes up and must leave everything alone
        assert [t.name for t in threading.enumerate()].count("misa-apply") == 1
        controller.close()
        assert contents(store) == data and store.checkpoints.newest_durable() == 0


def test_transient_dfs_errors_do_not_fail_the_commit(store):
    view = StateView(store)
    controller = CommitController(store, "misa")
    failpoints.configure("dfs.put=raise(2)")
    batch(view, 0, 0, 100)
    controller.commit(view.freeze(0), {})
    controller.wait_durable(0)
    assert store.checkpoints.newest_durable() == 0
    controller.close()


@pytest.mark.parametrize("mode", ["sync", "misa"])
def test_a_dfs_that_stays_down_fails_with_a_clear_error(store, mode):
    view = StateView(store)
    controller = CommitController(store, mode)
    batch(view, 0, 0, 100)
    controller.commit(view.freeze(0), {})
    controller.wait_durable(0)
    failpoints.configure("dfs.put=raise")
    batch(view, 1, 100, 100)
    stays_down = r"version 1 failed in its upload stage: DfsUnavailableError: .*failed after 3 attempts"
    with pytest.raises(CommitFailedError, match=stays_down) as err:
        controller.commit(view.freeze(1), {})
        controller.wait_durable(1)
    assert isinstance(err.value.__cause__, DfsUnavailableError)
    assert store.checkpoints.newest_durable() == 0
    controller.close()


@pytest.mark.timeout(60)
def test_a_replaced_upload_thread_never_touches_the_dfs_again(config, tmp_path, hooks):
    """The first upload thread stalls in a file put of version 0 and is replaced; it wakes while its
    successor uploads version 1 (files on the DFS, manifests and marker not yet) and must stop there:
    no put, no manifest, no marker, no GC (which would delete version 1's new files as orphans)."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        view = StateView(store)
        # headroom on a busy host
        controller = CommitController(store, "misa", heartbeat_timeout_s=0.5, max_restarts=10)
        old = worker_thread(controller, "upload")
        release = threading.Event()
        collectors: list[threading.Thread] = []

        def wake_the_old_thread() -> None:
            if threading.current_thread() is not old:
                release.set()
                old.join(30)

        hooks["dfs.put"] = first_time(lambda: release.wait(30))
        hooks["gc.before_delete"] = lambda: collectors.append(threading.current_thread())
        batch(view, 0, 0, 200)
        controller.commit(view.freeze(0), {})
        controller.wait_durable(0)  # the stalled thread was replaced, its successor made version 0 durable
        hooks["ckpt.after_upload"] = first_time(wake_the_old_thread)
        batch(view, 1, 100, 200)
        controller.commit(view.freeze(1), {})
        controller.drain()
        controller.close()
        assert release.is_set() and not old.is_alive() and old not in collectors
        assert store.checkpoints.dfs.committed_versions() == [0, 1]
        assert store.checkpoints.dfs.verify() == []  # every version's manifests and files are there
        dests = [tmp_path / "restored" / str(s) for s in range(store.shards)]
        assert store.checkpoints.restore(1, dests, prefer_local=False).source == "dfs"


@pytest.mark.timeout(60)
def test_a_replaced_apply_thread_never_rebuilds_the_local_checkpoint(config, tmp_path, hooks):
    """The first apply thread stalls after shard 0's checkpoint of version 0 and is replaced; it wakes
    after version 1 is applied and must not checkpoint the other shards (now at version 1) as version 0."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        view = StateView(store)
        # headroom on a busy host
        controller = CommitController(store, "misa", heartbeat_timeout_s=0.5, max_restarts=10)
        old = worker_thread(controller, "apply")
        release = threading.Event()
        hooks["ckpt.after_local_checkpoint"] = first_time(lambda: release.wait(30))
        data = batch(view, 0, 0, 200)
        controller.commit(view.freeze(0), {})
        controller.wait_durable(0)
        batch(view, 1, 100, 200)
        controller.commit(view.freeze(1), {})
        controller.wait_durable(1)
        release.set()
        old.join(30)
        controller.close()
        assert not old.is_alive()
        assert store.checkpoints.local.problems(0) == []
        assert store.load(0).source == "local" and contents(store) == data


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("point,stage", [("ckpt.after_flush", "apply"), ("ckpt.after_upload", "upload")])
def test_an_error_outside_the_dfs_retries_fails_the_batch_after_bounded_restarts(
    store, config, mode, point, stage, caplog
):
    view = StateView(store)
    controller = CommitController(store, mode, max_restarts=config.commit_max_restarts)
    failpoints.configure(f"{point}=raise")  # FailpointError: apply has no retry; after_upload is outside it
    batch(view, 0, 0, 100)
    with pytest.raises(CommitFailedError, match=rf"version 0 failed in its {stage} stage.*{point}") as err:
        controller.commit(view.freeze(0), {})
        controller.wait_durable(0)
    assert isinstance(err.value.__cause__, FailpointError)
    threaded = mode == "misa" or (mode == "async-ckpt" and stage == "upload")
    attempts = 1 + config.commit_max_restarts if threaded else 1
    assert failpoints.hits(point) == attempts
    deaths = [r for r in caplog.records if r.name == "misa.runtime.commit" and r.exc_info]
    assert len(deaths) == (attempts if threaded else 0)  # each dead thread logged once, with its traceback
    with pytest.raises(CommitFailedError, match="version 0"):
        controller.drain()
    controller.close()  # the error was raised already


@pytest.mark.timeout(60)
def test_close_raises_a_commit_error_nobody_has_seen(config, tmp_path, hooks):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        view = StateView(store)
        controller = CommitController(store, "misa", max_restarts=0)
        failing = threading.Event()
        hooks["ckpt.after_flush"] = failing.set
        failpoints.configure("ckpt.after_flush=raise")
        batch(view, 0, 0, 100)
        controller.commit(view.freeze(0), {})
        failing.wait(30)  # the apply thread is about to die; close() joins it
        with pytest.raises(CommitFailedError, match=r"version 0 failed in its apply stage.*ckpt\.after_flush"):
            controller.close()


def test_nocommit_writes_rocksdb_in_the_background_and_never_checkpoints(store, tmp_path):
    """The benchmarks' floor: versions count as done once applied; no flush, no checkpoint, no upload."""
    view = StateView(store)
    controller = CommitController(store, "nocommit")
    try:
        written = {}
        for version in range(3):
            written.update(batch(view, version, version * 10, 10))
            controller.commit(view.freeze(version), {"v": version})
        controller.drain()
        assert controller.wait_durable(2) < 5 and [r.version for r in controller.finished()] == [0, 1, 2]
        assert contents(store) == written
        assert store.checkpoints.newest_durable() is None and store.checkpoints.locally_committed_after(-1) == []
        assert not (tmp_path / "dfs").exists() or not any((tmp_path / "dfs").rglob("*"))
    finally:
        controller.close()


def test_reads_below_the_cache_take_each_key_from_the_newest_buffer_that_decides_it(store):
    """Two pending versions: the newer one's value or range delete wins, the older one answers the rest,
    RocksDB the keys neither buffer mentions."""
    view = StateView(store)
    store.write([(key(i), b"disk") for i in range(10)])
    pending_version(view, 0, {key(1): b"v0", key(2): b"v0", key(6): b"v0"}, (key(4), key(6)))
    pending_version(view, 1, {key(2): b"v1", key(5): b"v1"}, (key(6), key(8)))
    assert view.fetch_below([key(i) for i in range(10)]) == [
        b"disk",  # in no buffer
        b"v0",
        b"v1",  # the newer buffer wins
        b"disk",
        None,  # deleted by version 0's range
        b"v1",  # written after version 0's range delete, by version 1
        None,  # version 1's range delete hides version 0's put
        None,
        b"disk",
        b"disk",
    ]


def test_a_renewed_controller_keeps_the_settings_and_drops_the_tasks(store):
    """What a restart after a failed run uses: the same store, mode and limits, none of the old tasks."""
    view = StateView(store)
    old = CommitController(store, "sync", heartbeat_timeout_s=7.0, max_restarts=1)
    old.commit(view.freeze(0), {})
    old.close()
    new = old.renewed()
    try:
        assert (new.store, new.mode, new.timeout_s, new.max_restarts) == (store, "sync", 7.0, 1)
        assert new.status().pending == () and new.finished() == []
    finally:
        new.close()
