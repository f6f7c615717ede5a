"""Spark's checkpoint as a local copy mirrored to the checkpoint location (no Spark: the logs are written as
Spark writes them)."""

from __future__ import annotations

import json
import posixpath
import threading
import time
from pathlib import Path

import pytest
from state_helpers import key

from checkpoint.retry import RetryPolicy
from common import failpoints
from common.errors import FailpointError
from common.location import parse
from misa.runtime.commit import CommitController
from misa.runtime.recovery import reconcile
from misa.runtime.spark_log import SparkCheckpointLog
from misa.runtime.spark_mirror import MIRROR_ID_FILE, SparkLogMirror, _batch_of, _in_write_order
from misa.state.store import StateStore
from misa.state.view import StateView

NO_RETRY = RetryPolicy(max_attempts=1)
SPARK_LOGS = ("sources/0", "offsets", "commits")


def mirror_of(state_dir: Path, ckpt: Path | str) -> SparkLogMirror:
    return SparkLogMirror(state_dir, parse(str(ckpt)), NO_RETRY)


@pytest.fixture(params=["file", "s3"])
def ckpt_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The checkpoint location the mirror writes: a local folder or a bucket on the loopback S3 server (Spark
    itself only ever writes the local copy)."""
    return str(tmp_path / "ckpt") if request.param == "file" else request.getfixturevalue("s3_url")


def mirrored_files(mirror: SparkLogMirror) -> set[str]:
    """The files at the mirror's location, relative to it."""
    root = mirror.fs._strip_protocol(mirror.root)
    return {posixpath.relpath(mirror.fs._strip_protocol(p), root) for p in mirror.fs.find(mirror.root)}


def spark_writes(root: Path, batch: int, committed: bool = True) -> None:
    """What Spark writes for ``batch``: the file source's entry, the offsets entry (with Hadoop's checksum file
    beside it) and, once the batch ran, its commit entry."""
    (root / "metadata").parent.mkdir(parents=True, exist_ok=True)
    if not (root / "metadata").exists():
        (root / "metadata").write_text('{"id":"q"}')
    for folder, text in (("sources/0", f'v1\n{{"path":"f{batch}","batchId":{batch}}}'), ("offsets", "v1\n{}")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / str(batch)).write_text(text)
        (root / folder / f".{batch}.crc").write_bytes(b"crc")
    if committed:
        (root / "commits").mkdir(exist_ok=True)
        (root / "commits" / str(batch)).write_text("v1\n{}")


def mirrored_after(state_dir: Path, ckpt: Path | str, batches: range) -> SparkLogMirror:
    """A started mirror whose local copy Spark wrote ``batches`` into, mirrored."""
    mirror = mirror_of(state_dir, ckpt)
    mirror.prepare()
    for batch in batches:
        spark_writes(mirror.local_root, batch)
    mirror.sync()
    return mirror


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_a_step_copies_what_spark_added_without_hidden_files_and_removes_what_spark_removed(tmp_path, ckpt_url):
    mirror = mirror_of(tmp_path / "state", ckpt_url)
    assert mirror.prepare() is True  # nothing local yet: the (empty) mirror is taken
    for batch in range(3):
        spark_writes(mirror.local_root, batch)
    stats = mirror.sync()
    mirrored = mirrored_files(mirror) - {MIRROR_ID_FILE}
    assert mirrored == {"metadata", *(f"{f}/{b}" for f in ("sources/0", "offsets", "commits") for b in range(3))}
    assert (stats.files_copied, stats.files_removed, stats.bytes_copied) == (
        10,
        0,
        sum((mirror.local_root / rel).stat().st_size for rel in mirrored),
    )
    assert stats.requests >= 10
    for folder in ("offsets", "commits"):  # Spark's retention
        (mirror.local_root / folder / "0").unlink()
    (mirror.local_root / "offsets" / "1").write_text("v1\n{rewritten}")  # a changed entry is copied again
    stats = mirror.sync()
    assert (stats.files_copied, stats.files_removed) == (1, 2)
    assert {"offsets/0", "commits/0"}.isdisjoint(mirrored_files(mirror))
    assert mirror.fs.cat_file(f"{mirror.root}/offsets/1") == b"v1\n{rewritten}"
    assert mirror.sync().files_copied == 0  # nothing new: no request


def test_a_start_on_a_new_machine_restores_the_local_copy_from_the_mirror(tmp_path, ckpt_url):
    first = mirrored_after(tmp_path / "machine-a", ckpt_url, range(3))
    second = mirror_of(tmp_path / "machine-b", ckpt_url)
    assert second.prepare() is True
    assert files(second.local_root) == mirrored_files(first) - {MIRROR_ID_FILE}
    assert SparkCheckpointLog(second.local).batch_ids("commits") == [0, 1, 2]


def test_the_local_copy_counts_while_this_state_dir_mirrored_last_and_not_after_another_driver_did(tmp_path):
    a = mirrored_after(tmp_path / "machine-a", tmp_path / "ckpt", range(1))
    spark_writes(a.local_root, 1)  # not mirrored yet: the local copy is ahead
    restarted = mirror_of(tmp_path / "machine-a", tmp_path / "ckpt")
    assert restarted.prepare() is False
    assert SparkCheckpointLog(restarted.local).last_committed() == 1  # the local copy, ahead of the mirror
    b = mirror_of(tmp_path / "machine-b", tmp_path / "ckpt")  # a standby takes over and runs batch 1 and 2
    assert b.prepare() is True
    spark_writes(b.local_root, 1)
    spark_writes(b.local_root, 2)
    b.sync()
    back = mirror_of(tmp_path / "machine-a", tmp_path / "ckpt")  # machine A comes back: its copy is stale
    assert back.prepare() is True
    assert SparkCheckpointLog(back.local).last_committed() == 2


def test_a_local_copy_removed_beside_its_index_is_restored_from_the_mirror(tmp_path):
    a = mirrored_after(tmp_path / "state", tmp_path / "ckpt", range(1))
    for path in sorted(a.local_root.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    again = mirror_of(tmp_path / "state", tmp_path / "ckpt")
    assert again.prepare() is True
    assert SparkCheckpointLog(again.local).last_committed() == 0


def test_a_failed_step_is_completed_by_the_next_and_never_leaves_a_torn_entry(tmp_path):
    mirror = mirror_of(tmp_path / "state", tmp_path / "ckpt")
    mirror.prepare()
    spark_writes(mirror.local_root, 0)
    failpoints.configure("mirror.after_copy=raise(2)")
    try:
        with pytest.raises(FailpointError):
            mirror.sync()  # metadata went, the sources, offsets and commits did not
    finally:
        failpoints.configure("")
    assert SparkCheckpointLog(parse(str(tmp_path / "ckpt"))).batch_ids("offsets") == []
    assert not [p for p in (tmp_path / "ckpt").rglob(".*misa-tmp")]
    mirror.sync()
    assert SparkCheckpointLog(parse(str(tmp_path / "ckpt"))).last_committed() == 0
    index = json.loads((tmp_path / "state" / "spark-checkpoint.json").read_text())
    assert "commits/0" in index["files"]


@pytest.fixture
def store(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as s:
        yield s


@pytest.mark.parametrize("mode", ["sync", "async-ckpt", "misa"])
def test_ack_2_of_a_version_covers_the_log_files_it_needs(store, tmp_path, mode):
    """When Spark calls batch v, offsets/v and commits/v-1 are in the local copy; once v is durable they are in
    the mirror, so the mirror's last commit C and the durable state V keep V-1 <= C <= V+1 after a crash."""
    mirror = mirror_of(tmp_path / "state", tmp_path / "ckpt")
    mirror.prepare()
    view = StateView(store)
    controller = CommitController(store, mode, mirror)
    spark = SparkCheckpointLog(parse(str(tmp_path / "ckpt")))
    for version in range(3):
        spark_writes(mirror.local_root, version, committed=False)  # Spark plans batch v, then calls it
        view.put_many([key(version)], [b"x"])
        controller.commit(view.freeze(version), {})
        controller.wait_durable(version)
        assert store.checkpoints.newest_durable() == version
        assert version in spark.batch_ids("offsets")
        assert spark.last_committed() == version - 1 if version else spark.last_committed() == -1
        (mirror.local_root / "commits").mkdir(exist_ok=True)
        (mirror.local_root / "commits" / str(version)).write_text("v1\n{}")  # Spark commits after the batch
        controller.drain()  # the record is reported once the retention after ack 2 ran
        record = controller.finished()[-1]
        assert record.log_files_mirrored >= 2 and record.ack2_s >= record.ack1_s > 0
    controller.close()


def test_recovery_on_a_new_machine_continues_from_the_mirrored_log(store, config, tmp_path):
    """A version made durable with its log files mirrored is where a new machine (empty state dir) resumes."""
    mirror = mirror_of(tmp_path / "state", tmp_path / "ckpt")
    mirror.prepare()
    view = StateView(store)
    controller = CommitController(store, "misa", mirror)
    for version in range(2):
        spark_writes(mirror.local_root, version, committed=False)
        view.put_many([key(version)], [str(version).encode()])
        controller.commit(view.freeze(version), {})
        controller.wait_durable(version)
        spark_writes(mirror.local_root, version)
    controller.close()  # the driver dies here: commits/1 was never mirrored
    with StateStore(config, tmp_path / "new-machine", f"file://{tmp_path / 'dfs'}") as moved:
        new = mirror_of(tmp_path / "new-machine", tmp_path / "ckpt")
        assert new.prepare() is True
        assert reconcile(moved, new.local) == 0  # C = 0, V = 1: roll back to 0, Spark replays batch 1
        assert SparkCheckpointLog(new.local).batch_ids("offsets") == [0, 1]
        assert moved.get(key(0)) == b"0" and moved.get(key(1)) is None


def test_the_mirror_runs_beside_the_upload_and_the_marker_waits_for_it(store, tmp_path):
    """The mirror step overlaps the version's upload (both cost round trips on a remote DFS), and the DFS marker
    is written only after it: ack 2 still covers the log files."""
    mirror = mirror_of(tmp_path / "state", tmp_path / "ckpt")
    mirror.prepare()
    spark_writes(mirror.local_root, 0, committed=False)
    in_mirror, release = threading.Event(), threading.Event()
    real_sync = mirror.sync

    def slow_sync(fence):
        in_mirror.set()
        assert release.wait(10)
        return real_sync(fence)

    mirror.sync = slow_sync
    view = StateView(store)
    controller = CommitController(store, "misa", mirror)
    view.put_many([key(0)], [b"x"])
    controller.commit(view.freeze(0), {})
    assert in_mirror.wait(10)
    time.sleep(0.5)  # the upload's files and manifests go meanwhile; the marker waits
    assert store.checkpoints.newest_durable() is None
    assert store.checkpoints.dfs.fs.exists(f"{store.checkpoints.dfs.root}/shard-0/manifest/0.json")
    release.set()
    controller.wait_durable(0)
    assert store.checkpoints.newest_durable() == 0
    assert 0 in SparkCheckpointLog(parse(str(tmp_path / "ckpt"))).batch_ids("offsets")
    controller.close()


def test_a_batch_waits_for_ack_2_not_for_the_retention_after_it(store, tmp_path, monkeypatch):
    """Retention (GC on both levels) runs after ack 2 on the upload thread: the next batch's wait ends at the
    marker; the version's record, with the retention's requests, is reported once retention ran; drain waits."""
    view = StateView(store)
    controller = CommitController(store, "misa")
    in_retention, release = threading.Event(), threading.Event()
    real_retain = store.checkpoints.gc

    def slow_retain(version, fence):
        in_retention.set()
        assert release.wait(10)
        return real_retain(version, fence)

    monkeypatch.setattr(store.checkpoints, "gc", slow_retain)
    view.put_many([key(0)], [b"x"])
    controller.commit(view.freeze(0), {})
    controller.wait_durable(0)  # returns while retention is held
    assert in_retention.wait(10) and store.checkpoints.newest_durable() == 0
    assert controller.finished() == []  # its record is not complete yet
    release.set()
    controller.drain()
    (record,) = controller.finished()
    assert record.version == 0 and record.retention_requests > 0
    controller.close()


def test_spark_log_is_mirrored_on_request_without_a_next_upload(store, config, tmp_path):
    """When Spark reports batch v, commits/v is mirrored in the background, not only with version v+1's upload
    (an idle query makes none): a start on a new machine then continues after v instead of replaying it."""
    mirror = mirror_of(tmp_path / "state", tmp_path / "ckpt")
    mirror.prepare()
    view = StateView(store)
    controller = CommitController(store, "misa", mirror)
    spark = SparkCheckpointLog(parse(str(tmp_path / "ckpt")))
    spark_writes(mirror.local_root, 0, committed=False)
    view.put_many([key(0)], [b"x"])
    controller.commit(view.freeze(0), {})
    controller.wait_durable(0)
    spark_writes(mirror.local_root, 0)  # Spark commits batch 0 and reports it
    assert spark.last_committed() == -1
    controller.mirror_spark_log()
    deadline = time.monotonic() + 10
    while spark.last_committed() != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert spark.last_committed() == 0
    controller.close()
    controller.mirror_spark_log()  # after close: nothing, no error
    with StateStore(config, tmp_path / "new-machine", f"file://{tmp_path / 'dfs'}") as moved:
        new = mirror_of(tmp_path / "new-machine", tmp_path / "ckpt")
        assert new.prepare() is True
        assert reconcile(moved, new.local) == 0 and moved.get(key(0)) == b"x"  # C = V = 0: no replay


def test_a_step_over_two_batches_never_mirrors_a_batchs_offsets_before_the_commit_of_the_batch_before():
    """One step sees batch 1 run and committed and batch 2 planned (a step at the start of batch 2, or an upload
    that overlaps Spark's writes). A step cut short after any of its groups must leave a log Spark's restart reads
    as written: its newest offsets entry at most one past its newest commit (else Spark would run batch 2 without
    batch 1's commit, and recovery would see a gap)."""
    new = ["sources/0/1", "offsets/1", "commits/1", "sources/0/2", "offsets/2"]
    groups = _in_write_order(reversed(new))
    copied = {"metadata", "sources/0/0", "offsets/0", "commits/0"}  # mirrored by the steps before
    for group in groups:
        copied |= set(group)
        newest = {log: max((_batch_of(r) for r in copied if r.startswith(log)), default=-1) for log in SPARK_LOGS}
        assert newest["offsets"] <= newest["commits"] + 1, (group, sorted(copied))
        assert newest["sources/0"] <= newest["offsets"] + 1, (group, sorted(copied))
    assert [r for group in groups for r in group] == new
