"""Reconciling the state store with Spark's offsets and commits logs (DESIGN section 5)."""

import json
import threading
from pathlib import Path

import pytest
from state_helpers import fill

from common.errors import FailpointError
from misa.exceptions import RecoveryError
from misa.runtime.recovery import reconcile, require_fresh
from misa.state.store import EMPTY_VERSION, StateStore


def spark_log(ckpt: Path, committed: int, offsets: int) -> None:
    """A Spark checkpoint whose commits log ends at ``committed`` and offsets log at ``offsets``."""
    for folder, last in (("commits", committed), ("offsets", offsets)):
        (ckpt / folder).mkdir(parents=True, exist_ok=True)
        for batch_id in range(last + 1):
            (ckpt / folder / str(batch_id)).write_text("v1\n{}")
            (ckpt / folder / f".{batch_id}.crc").write_text("crc")


def entries(ckpt: Path, folder: str) -> list[int]:
    return sorted(int(p.name) for p in (ckpt / folder).iterdir() if p.name.isdigit())


@pytest.fixture
def store(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as s:
        for version in range(3):
            fill(s, 100, seed=version, start=version * 100)
            s.checkpoint(version)
            s.checkpoints.upload_and_retain(version)
        yield s


def test_fresh_start(config, tmp_path):
    with StateStore(config, tmp_path / "s", f"file://{tmp_path / 'd'}") as s:
        assert reconcile(s, str(tmp_path / "ckpt")) == EMPTY_VERSION


def test_resume_when_spark_and_state_agree(store, tmp_path):
    spark_log(tmp_path / "ckpt", committed=2, offsets=2)
    assert reconcile(store, str(tmp_path / "ckpt")) == 2


def test_state_ahead_of_spark_rolls_back(store, tmp_path):
    spark_log(tmp_path / "ckpt", committed=1, offsets=2)
    assert reconcile(store, str(tmp_path / "ckpt")) == 1
    assert store.checkpoints.dfs.committed_versions() == [0, 1]  # version 2 is rebuilt by the replay
    assert store.checkpoints.local.versions() == [0, 1]


def test_batch_in_flight_is_replayed_by_spark(store, tmp_path):
    spark_log(tmp_path / "ckpt", committed=3, offsets=4)
    assert reconcile(store, str(tmp_path / "ckpt")) == 2
    assert entries(tmp_path / "ckpt", "commits") == [0, 1, 2]
    assert entries(tmp_path / "ckpt", "offsets") == [0, 1, 2, 3]  # Spark replays batch 3 from its offsets
    assert not (tmp_path / "ckpt" / "commits" / ".3.crc").exists()


def test_locally_committed_version_is_uploaded_first(store, tmp_path):
    fill(store, 100, seed=9, start=300)
    store.checkpoint(3)  # ack 1 only: the process died before the upload
    spark_log(tmp_path / "ckpt", committed=3, offsets=3)
    assert reconcile(store, str(tmp_path / "ckpt")) == 3
    assert store.checkpoints.newest_durable() == 3


def test_impossible_gap_fails_loudly(store, tmp_path):
    spark_log(tmp_path / "ckpt", committed=5, offsets=5)
    with pytest.raises(
        RecoveryError, match=r"last committed batch is 5 .* but the state is at version 2 .*batches 3..4 is missing"
    ):
        reconcile(store, str(tmp_path / "ckpt"))


# ---------------------------------------------------------------- locations Spark accepts
@pytest.mark.parametrize("form", ["file:{path}", "file://{path}", "{path}"])
def test_every_local_form_of_the_location_reads_the_same_spark_log(store, tmp_path, form):
    spark_log(tmp_path / "ckpt", committed=2, offsets=2)
    assert reconcile(store, form.format(path=tmp_path / "ckpt")) == 2
    assert store.checkpoints.dfs.committed_versions() == [0, 1, 2]  # nothing forgotten


def test_spark_log_on_an_object_store_is_read_through_fsspec(store, s3_url):
    import fsspec

    fs, root = fsspec.core.url_to_fs(s3_url)
    for folder in ("commits", "offsets"):
        for batch_id in range(3):
            fs.pipe_file(f"{root}/ckpt/{folder}/{batch_id}", b"v1\n{}")
    fs.pipe_file(f"{root}/ckpt/offsets/3", b"v1\n{}")
    location = s3_url.replace("s3://", "s3a://") + "/ckpt"  # Hadoop's spelling, as Spark is given it
    assert reconcile(store, location) == 2
    assert store.checkpoints.dfs.committed_versions() == [0, 1, 2]


# ---------------------------------------------------------------- never destroy what cannot be replaced
def test_spark_far_behind_the_state_fails_and_touches_nothing(store, tmp_path):
    spark_log(tmp_path / "ckpt", committed=0, offsets=1)
    with pytest.raises(
        RecoveryError, match=r"Spark's last committed batch is 0 \(checkpoint at .*\) but the state is at version 2"
    ):
        reconcile(store, str(tmp_path / "ckpt"))
    assert store.checkpoints.dfs.committed_versions() == [0, 1, 2]
    assert store.checkpoints.local.versions() == [0, 1, 2]


def test_a_fresh_spark_checkpoint_beside_existing_state_fails_and_touches_nothing(store, tmp_path):
    with pytest.raises(RecoveryError, match="no committed batch"):
        reconcile(store, str(tmp_path / "another-ckpt"))
    assert store.checkpoints.dfs.committed_versions() == [0, 1, 2]


def test_a_rollback_to_a_version_that_cannot_be_restored_keeps_the_newer_one(store, tmp_path):
    spark_log(tmp_path / "ckpt", committed=1, offsets=2)
    for level in (store.checkpoints.local, store.checkpoints.dfs):  # version 1 damaged on both levels
        for path in [p for p in Path(level.root).glob("shard-*/manifest/1.json")]:
            path.write_text("{")
    with pytest.raises(RecoveryError, match="version 1 cannot be restored"):
        reconcile(store, str(tmp_path / "ckpt"))
    assert 2 in store.checkpoints.dfs.committed_versions() and 2 in store.checkpoints.local.versions()


# ---------------------------------------------------------------- a crash inside recovery
def consistent(ckpt: Path, version: int) -> None:
    """Spark resumes exactly after ``version``: commits end there and offsets at most one further."""
    assert max(entries(ckpt, "commits")) <= version + 1
    assert max(entries(ckpt, "offsets")) <= max(entries(ckpt, "commits")) + 1


def test_a_failed_offsets_removal_never_leaves_the_commit_entry_gone(store, tmp_path, monkeypatch):
    import os

    spark_log(tmp_path / "ckpt", committed=3, offsets=4)
    real_unlink, real_remove = os.unlink, os.remove

    def refuse_offsets(path, *args, **kwargs):
        if Path(path).parent.name == "offsets":
            raise PermissionError(f"cannot remove {path}")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refuse_offsets)
    monkeypatch.setattr(os, "remove", refuse_offsets)
    with pytest.raises(PermissionError):
        reconcile(store, str(tmp_path / "ckpt"))
    monkeypatch.setattr(os, "unlink", real_unlink)
    monkeypatch.setattr(os, "remove", real_remove)
    # batch 3 must still be replayed: its commit entry stays until the later offsets are gone
    assert entries(tmp_path / "ckpt", "commits") == [0, 1, 2, 3]
    assert reconcile(store, str(tmp_path / "ckpt")) == 2
    assert entries(tmp_path / "ckpt", "commits") == [0, 1, 2]
    assert entries(tmp_path / "ckpt", "offsets") == [0, 1, 2, 3]


@pytest.mark.parametrize("point", ["recovery.after_offset_removed", "recovery.after_commit_removed"])
def test_a_crash_at_each_replay_step_is_handled_by_the_next_recovery(store, tmp_path, point):
    from common import failpoints

    spark_log(tmp_path / "ckpt", committed=3, offsets=4)
    failpoints.configure(f"{point}=raise")
    with pytest.raises(FailpointError):
        reconcile(store, str(tmp_path / "ckpt"))
    assert failpoints.hits(point) == 1
    consistent(tmp_path / "ckpt", 2)
    failpoints.configure("")
    assert reconcile(store, str(tmp_path / "ckpt")) == 2
    assert entries(tmp_path / "ckpt", "commits") == [0, 1, 2]
    assert entries(tmp_path / "ckpt", "offsets") == [0, 1, 2, 3]


def test_a_crash_before_a_rollback_forgets_anything_is_handled_by_the_next_recovery(store, tmp_path):
    from common import failpoints

    spark_log(tmp_path / "ckpt", committed=1, offsets=2)
    failpoints.configure("recovery.before_rollback=raise")
    with pytest.raises(FailpointError):
        reconcile(store, str(tmp_path / "ckpt"))
    assert failpoints.hits("recovery.before_rollback") == 1
    assert store.checkpoints.dfs.committed_versions() == [0, 1, 2]
    failpoints.configure("")
    assert reconcile(store, str(tmp_path / "ckpt")) == 1
    assert store.checkpoints.dfs.committed_versions() == [0, 1]


# ---------------------------------------------------------------- the file source's own log
def file_source_log(ckpt: Path, last: int, compact_at: int | None = None) -> None:
    """A file source log (``sources/0``) with one file per batch 0..last; offsets name its logOffset."""
    folder = ckpt / "sources" / "0"
    folder.mkdir(parents=True)
    record = lambda b: f'{{"path":"file:///in/f{b}.json","timestamp":1,"batchId":{b}}}'  # noqa: E731
    for b in range(last + 1):
        if b == compact_at:
            (folder / f"{b}.compact").write_text("v1\n" + "\n".join(record(x) for x in range(b + 1)))
            (folder / f".{b}.compact.crc").write_text("crc")
        else:
            (folder / str(b)).write_text(f"v1\n{record(b)}")
            (folder / f".{b}.crc").write_text("crc")
    for b in entries(ckpt, "offsets"):
        (ckpt / "offsets" / str(b)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{{"logOffset":{b}}}')


@pytest.mark.parametrize("compact_at", [None, 4])
def test_a_replay_trims_the_file_source_log_so_later_batches_are_planned_as_before(store, tmp_path, compact_at):
    """Left in place, source entry 4 would make Spark's next batch span source batches 4 and 5."""
    ckpt = tmp_path / "ckpt"
    spark_log(ckpt, committed=3, offsets=4)
    file_source_log(ckpt, last=4, compact_at=compact_at)
    assert reconcile(store, str(ckpt)) == 2
    names = sorted(p.name for p in (ckpt / "sources" / "0").iterdir())
    if compact_at is None:
        assert names == [".0.crc", ".1.crc", ".2.crc", ".3.crc", "0", "1", "2", "3"]
    else:  # the compacted entry stays (Spark's log needs it) but without batch 4's file, and without its old checksum
        assert "4.compact" in names and ".4.compact.crc" not in names
        lines = (ckpt / "sources" / "0" / "4.compact").read_text().splitlines()
        assert lines[0] == "v1" and [json.loads(r)["batchId"] for r in lines[1:]] == [0, 1, 2, 3]
    assert entries(ckpt, "offsets") == [0, 1, 2, 3] and entries(ckpt, "commits") == [0, 1, 2]


def damage(store: StateStore, version: int) -> None:
    for root in (store.checkpoints.local.root, Path(store.checkpoints.dfs.root)):
        for path in Path(root).glob(f"shard-*/manifest/{version}.json"):
            path.write_text('{"files": 3}')


def test_a_newest_version_restorable_from_neither_level_stops_recovery_and_names_the_option(store, tmp_path):
    spark_log(tmp_path / "ckpt", committed=2, offsets=2)
    damage(store, 2)
    with pytest.raises(
        RecoveryError,
        match=r"version 2 cannot be restored from either level.*Version 1 can be "
        r"restored: set spark\.misa\.recovery\.allowPreviousVersion=true",
    ):
        reconcile(store, str(tmp_path / "ckpt"))
    assert entries(tmp_path / "ckpt", "commits") == [0, 1, 2] and 2 in store.checkpoints.dfs.committed_versions()


def test_with_the_option_recovery_starts_from_the_previous_version_and_spark_replays_the_rest(store, tmp_path):
    spark_log(tmp_path / "ckpt", committed=2, offsets=2)
    damage(store, 2)
    assert reconcile(store, str(tmp_path / "ckpt"), allow_previous=True) == 1
    assert entries(tmp_path / "ckpt", "commits") == [0, 1]
    assert entries(tmp_path / "ckpt", "offsets") == [0, 1, 2]  # Spark replays batch 2 from its offsets
    assert store.checkpoints.dfs.committed_versions() == [0, 1] and store.checkpoints.local.versions() == [0, 1]
    store.load(1)


def test_a_source_entry_no_offsets_entry_planned_is_forgotten_on_resume(store, tmp_path):
    """A crash between Spark's file-source log entry 3 and offsets/3: the resumed query must plan batch 3
    from the files alone, not from entry 3 plus the next files."""
    ckpt = tmp_path / "ckpt"
    spark_log(ckpt, committed=2, offsets=2)
    file_source_log(ckpt, last=3)
    assert reconcile(store, str(ckpt)) == 2
    assert sorted(p.name for p in (ckpt / "sources" / "0").iterdir() if not p.name.startswith(".")) == ["0", "1", "2"]


def test_a_source_log_that_is_not_a_file_sources_is_never_touched(store, tmp_path):
    ckpt = tmp_path / "ckpt"
    spark_log(ckpt, committed=2, offsets=2)
    (ckpt / "sources" / "0").mkdir(parents=True)
    (ckpt / "sources" / "0" / "0").write_text('v1\n{"topic":{"0":12}}')  # Kafka's initial offsets
    assert reconcile(store, str(ckpt)) == 2
    assert (ckpt / "sources" / "0" / "0").exists()


def test_nocommit_starts_only_fresh(config, tmp_path, store):
    """A nocommit run keeps nothing durable: over a Spark log or state with history it refuses to start."""
    with StateStore(config, tmp_path / "fresh", f"file://{tmp_path / 'fresh-dfs'}") as fresh:
        require_fresh(fresh, str(tmp_path / "new-ckpt"))
        spark_log(tmp_path / "old-ckpt", committed=0, offsets=0)
        with pytest.raises(RecoveryError, match="nocommit keeps no durable state.*committed batch 0"):
            require_fresh(fresh, str(tmp_path / "old-ckpt"))
    with pytest.raises(RecoveryError, match=r"versions \[0, 1, 2\]"):
        require_fresh(store, str(tmp_path / "new-ckpt"))


def test_a_restore_that_fails_leaves_sparks_logs_and_the_markers_alone(store, config, tmp_path):
    """On a new machine the target comes from the DFS; when that download fails, nothing may have changed."""
    from common import failpoints

    ckpt = tmp_path / "ckpt"
    spark_log(ckpt, committed=3, offsets=4)  # batch 3 was in flight: recovery would make Spark replay it
    store.close()
    with StateStore(config, tmp_path / "new-machine", f"file://{tmp_path / 'dfs'}") as moved:
        failpoints.configure("dfs.get=raise")
        with pytest.raises(Exception, match="failpoint dfs.get"):
            reconcile(moved, str(ckpt))
        failpoints.configure("")
        assert entries(ckpt, "commits") == [0, 1, 2, 3] and entries(ckpt, "offsets") == [0, 1, 2, 3, 4]
        assert moved.checkpoints.dfs.committed_versions() == [0, 1, 2]
        assert reconcile(moved, str(ckpt)) == 2
        assert moved.version == 2 and moved.count_keys() == 300


def test_a_fresh_spark_checkpoint_beside_a_single_version_fails_and_touches_nothing(config, tmp_path):
    """One version is as much another query's state as three: it is never rolled back to empty."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as one:
        fill(one, 10, seed=1)
        one.checkpoint(0)
        one.checkpoints.upload_and_retain(0)
        with pytest.raises(RecoveryError, match="Spark's checkpoint is new .* belongs to another query"):
            reconcile(one, str(tmp_path / "new-ckpt"))
        assert one.checkpoints.dfs.committed_versions() == [0] and one.checkpoints.local.versions() == [0]


def test_version_0_committed_before_spark_logged_batch_0_is_rolled_back(config, tmp_path):
    """Batch 0 planned (offsets/0) but not committed by Spark while version 0 is durable: Spark replays it."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as one:
        fill(one, 10, seed=1)
        one.checkpoint(0)
        one.checkpoints.upload_and_retain(0)
        spark_log(tmp_path / "ckpt", committed=-1, offsets=0)
        assert reconcile(one, str(tmp_path / "ckpt")) == EMPTY_VERSION


def test_a_restart_with_nothing_to_replay_heals_the_dfs_copy_from_the_local_one(store, tmp_path):
    """Found by the soak: the local copy was used, the damaged DFS copy never read, and a new machine lost the state."""
    from checkpoint.dfs import Check

    dfs = tmp_path / "dfs"
    sst = sorted(dfs.glob("shard-*/sst/*.sst"))[-1]
    data = bytearray(sst.read_bytes())
    data[len(data) // 2] ^= 0xFF
    sst.write_bytes(bytes(data))
    assert store.checkpoints.dfs.verify([2], Check.DIGESTS)  # damaged
    spark_log(tmp_path / "ckpt", committed=2, offsets=2)
    assert reconcile(store, str(tmp_path / "ckpt")) == 2
    store.checkpoints.wait_repair()  # the DFS copy is healed in the background
    assert store.checkpoints.dfs.verify([0, 1, 2], Check.DIGESTS) == []


def test_a_rollback_waits_for_the_background_heal_which_would_write_a_forgotten_marker_again(
    store, tmp_path, monkeypatch
):
    """The heal uploads every retained version again where its DFS copy is damaged, marker last; a rollback that
    forgot a version's marker meanwhile saw it come back (the flaky
    ``test_a_crash_before_a_rollback_forgets_anything_is_handled_by_the_next_recovery``)."""
    healing, release = threading.Event(), threading.Event()
    real_upload = store.checkpoints.dfs.upload

    def slow_heal(version, *args):  # the heal of version 2 has read its local manifests, then waits
        if threading.current_thread().name == "misa-repair" and version == 2:
            healing.set()
            release.wait(10)
        return real_upload(version, *args)

    monkeypatch.setattr(store.checkpoints.dfs, "upload", slow_heal)
    store.checkpoints.start_repair()
    assert healing.wait(10)
    threading.Timer(0.3, release.set).start()
    store.checkpoints.forget_after(1)
    store.checkpoints.wait_repair()
    assert store.checkpoints.dfs.committed_versions() == [0, 1]


def three_versions_the_newest_compacted(store: StateStore, dfs: Path) -> set[str]:
    """Versions 0 to 2 of ``store`` durable at ``dfs``, compacted before version 2; the SSTs only 0 and 1 name."""
    for version in range(2):
        fill(store, 100, seed=version)
        store.checkpoint(version)
        store.checkpoints.upload_and_retain(version)
    only_old = {p.name for p in dfs.glob("shard-*/sst/*.sst")}
    store.compact()  # version 2 names only new files
    fill(store, 100, seed=2)
    store.checkpoint(2)
    store.checkpoints.upload_and_retain(2)
    only_old -= {f.name for m in store.checkpoints.dfs.manifests(2) for f in m.files}
    assert only_old
    return only_old


def test_the_heal_covers_every_retained_version_with_a_local_copy_not_only_the_target(config, tmp_path):
    """Found by the soak: the target was healed, but the older retained version still named a deleted SST
    that compaction had dropped from the target, and stayed damaged on the DFS."""
    from checkpoint.dfs import Check

    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as one:
        only_old = three_versions_the_newest_compacted(one, tmp_path / "dfs")
        for sst in (tmp_path / "dfs").glob("shard-*/sst/*.sst"):
            if sst.name in only_old:
                sst.unlink()
        assert one.checkpoints.dfs.verify([1], Check.SIZES)  # damaged
        spark_log(tmp_path / "ckpt", committed=2, offsets=2)
        assert reconcile(one, str(tmp_path / "ckpt")) == 2
        one.checkpoints.wait_repair()
        assert one.checkpoints.dfs.verify([0, 1, 2], Check.DIGESTS) == []


@pytest.mark.parametrize("copy", [False, True])
def test_a_state_ahead_of_sparks_log_is_refused_with_the_remedy_that_applies(store, tmp_path, copy):
    """State at version 2 and Spark's log at batch 0: when that log is the runtime's local copy of it, the message
    says how to make the next start take the checkpoint location instead."""
    ckpt = tmp_path / "state" / "spark-checkpoint" if copy else tmp_path / "ckpt"
    spark_log(ckpt, committed=0, offsets=0)
    with pytest.raises(RecoveryError, match="ahead of Spark by more than the one version") as refused:
        reconcile(store, str(ckpt))
    remedy = f"remove {tmp_path / 'state' / 'spark-checkpoint.json'}"
    assert (remedy in str(refused.value)) == copy


def test_a_damaged_older_version_no_local_copy_can_repair_is_forgotten_on_a_new_machine(config, tmp_path, caplog):
    """Soak seed 45, iteration 66 (state hosts on the executors, which never reuse an old host's folder): a file of an
    older retained version was deleted from the DFS; recovery restored the newest version, and the older one stayed
    damaged, with nothing to heal it from (``misa ckpt verify`` failed). Such a version is now forgotten: recovery
    could never use it. The newest version and the sound ones stay."""
    import logging

    from checkpoint.dfs import Check

    dfs = f"file://{tmp_path / 'dfs'}"
    with StateStore(config, tmp_path / "state", dfs) as one:
        only_old = three_versions_the_newest_compacted(one, tmp_path / "dfs")
    damaged = [p for p in (tmp_path / "dfs").glob("shard-*/sst/*.sst") if p.name in only_old][0]
    damaged.unlink()
    spark_log(tmp_path / "ckpt", committed=2, offsets=2)
    with StateStore(config, tmp_path / "new-machine", dfs) as two, caplog.at_level(logging.WARNING):
        problems = two.checkpoints.dfs.verify(None, Check.SIZES)
        assert problems and all(p.startswith(("version 0:", "version 1:")) for p in problems)
        assert reconcile(two, str(tmp_path / "ckpt")) == 2
        two.checkpoints.wait_repair()
        assert two.checkpoints.dfs.verify(None, Check.DIGESTS) == []
        kept = two.checkpoints.dfs.committed_versions()
        assert 2 in kept and len(kept) == 3 - len({int(p.split(":")[0].split()[1]) for p in problems})
    assert f"{damaged.name} is missing" in caplog.text and "no local copy can repair it" in caplog.text
