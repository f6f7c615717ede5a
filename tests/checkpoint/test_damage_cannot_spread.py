"""Issue 24: one damaged file on the DFS never spreads to later versions, a damaged old version never
stops a commit, and retention never deletes outside its own layout."""

import logging
import os
from pathlib import Path

import fsspec
import pytest
from state_helpers import contents, fill

from checkpoint import dfs as dfs_module
from checkpoint.dfs import Check
from checkpoint.exceptions import CorruptCheckpointError
from checkpoint.manifest import manifest_path, marker_path
from misa.cli import main as misa
from misa.state.store import StateStore


def commit(store: StateStore, version: int, compact: bool = False):
    """Write version ``version`` (new keys plus updates of old ones) and make it durable."""
    fill(store, 300, seed=version, start=version * 150)
    if compact:
        store.compact()
    store.checkpoint(version)
    return store.checkpoints.upload_and_retain(version)


def shared_sst(store: StateStore, older: int, newer: int) -> str:
    """The DFS path (relative to its root) of an SST that both ``older`` (durable) and ``newer`` (checkpointed
    locally, not yet uploaded) consist of."""
    durable = {f.remote_path(m.shard) for m in store.checkpoints.dfs.manifests(older) for f in m.files}
    local = [f.remote_path(m.shard) for m in store.checkpoints.local.manifests(newer) for f in m.files]
    return next(p for p in local if p.endswith(".sst") and p in durable)


def damage(dfs_url: str, relative: str, how: str) -> None:
    """Flip one bit (the size stays), or delete the file."""
    fs, root = fsspec.core.url_to_fs(dfs_url)
    path = f"{root}/{relative}"
    if how == "delete":
        fs.rm_file(path)
        return
    data = fs.cat_file(path)
    fs.pipe_file(path, data[:100] + bytes([data[100] ^ 1]) + data[101:])


def restore_everywhere(config, tmp_path: Path, dfs_url: str, states: dict[int, dict]) -> None:
    """On a new machine (nothing local), every committed version restores to what was committed."""
    with StateStore(config, tmp_path / "new-machine", dfs_url) as other:
        versions = other.checkpoints.dfs.committed_versions()
        assert versions
        for version in versions:
            assert other.restore_problems(version) == []
            assert other.load(version).source == "dfs" and contents(other) == states[version]


# ---------------------------------------------------------------- (a) a damaged file is repaired, not reused
@pytest.mark.parametrize("restart", [False, True], ids=["same-process", "restarted"])
@pytest.mark.parametrize("how", ["flip", "delete"])
def test_a_damaged_or_deleted_file_is_repaired_before_a_version_that_reuses_it_is_acked(
    config, tmp_path, dfs_url, how, restart
):
    states = {}
    store = StateStore(config, tmp_path / "state", dfs_url)
    commit(store, 0)
    states[0] = contents(store)
    if restart:  # the next upload runs in a process that has verified nothing yet
        store.close()
        store = StateStore(config, tmp_path / "state", dfs_url)
        store.load(0)
    fill(store, 300, seed=1, start=150)
    store.checkpoint(1)
    victim = shared_sst(store, 0, 1)
    damage(dfs_url, victim, how)
    stats = store.checkpoints.upload_and_retain(1)
    states[1] = contents(store)
    # uploaded again either way; counted as a repair when it was seen: damaged in place, or verified before
    assert stats.files_repaired == (0 if how == "delete" and restart else 1)
    commit(store, 2)
    states[2] = contents(store)
    store.close()
    assert store.checkpoints.dfs.verify(check=Check.DIGESTS) == []
    restore_everywhere(config, tmp_path, dfs_url, states)  # v0 is healed too: it names the same file


def test_a_reused_file_is_read_back_once_per_process_not_every_version(config, tmp_path, dfs_url, monkeypatch):
    reads: list[int] = []
    real = dfs_module.copy_and_digest

    def counting(src, dst):
        if dst is None:  # a read-back of a DFS file, not an upload
            reads.append(1)
        return real(src, dst)

    monkeypatch.setattr(dfs_module, "copy_and_digest", counting)
    with StateStore(config, tmp_path / "state", dfs_url) as store:
        commit(store, 0)
        commit(store, 1)
        assert reads == []  # what this process uploaded was checked as it was written
    with StateStore(config, tmp_path / "state", dfs_url) as store:
        store.load(1)
        stats = commit(store, 2)
        assert len(reads) == stats.files_reused > 0  # each file this process reuses is read once ...
        reads.clear()
        stats = commit(store, 3)
        assert stats.files_reused > 0 and reads == []  # ... and not again while its listing is unchanged


@pytest.mark.parametrize("how", ["flip", "delete"])
def test_problems_checks_what_restore_checks(config, tmp_path, dfs_url, how):
    with StateStore(config, tmp_path / "state", dfs_url) as store:
        commit(store, 0)
        fill(store, 300, seed=1, start=150)
        store.checkpoint(1)
        victim = shared_sst(store, 0, 1)
        store.checkpoints.upload_and_retain(1)
        damage(dfs_url, victim, how)
        assert store.restore_problems(1) == []  # the local copy is valid: the DFS is not needed
        with StateStore(config, tmp_path / "new-machine", dfs_url) as other:
            for version in (0, 1):
                problems = other.restore_problems(version)
                assert problems and Path(victim).name in " ".join(problems)
                with pytest.raises(CorruptCheckpointError, match=Path(victim).name):
                    other.load(version)


# ---------------------------------------------------------------- (b) a damaged old version never stops a commit
@pytest.mark.parametrize("torn", ["marker", "manifest"])
def test_a_torn_old_version_is_kept_by_gc_and_never_fails_a_commit(config, tmp_path, caplog, torn):
    dfs = tmp_path / "dfs"
    dfs_url = f"file://{dfs}"
    with StateStore(config, tmp_path / "state", dfs_url) as store:  # retainVersions is 3
        commit(store, 0)
        commit(store, 1)
        commit(store, 2, compact=True)  # v2 no longer needs the files only v0 and v1 consist of
        v1_files = {dfs / f.remote_path(m.shard) for m in store.checkpoints.dfs.manifests(1) for f in m.files}
        states = {2: contents(store)}
    damaged = marker_path(1) if torn == "marker" else manifest_path(0, 1)
    (dfs / damaged).write_bytes((dfs / damaged).read_bytes()[:20])
    caplog.set_level(logging.WARNING)
    with StateStore(config, tmp_path / "state", dfs_url) as store:  # a restart: nothing is cached
        store.load(2)
        commit(store, 3, compact=True)  # retention runs and must not fail
        states[3] = contents(store)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert any("version 1" in w and damaged in w for w in warnings), warnings
        assert 1 in store.checkpoints.dfs.committed_versions()
        assert all(path.exists() for path in v1_files)  # nothing v1 might consist of was deleted
        commit(store, 4)  # v1 is now older than the three newest readable versions: it expires
        states[4] = contents(store)
        assert store.checkpoints.dfs.committed_versions() == [2, 3, 4]
        assert store.checkpoints.dfs.verify(check=Check.DIGESTS) == []
    restore_everywhere(config, tmp_path, dfs_url, states)


def test_ckpt_gc_over_a_damaged_version_prints_one_line_naming_it(config, tmp_path, capsys):
    dfs = tmp_path / "dfs"
    with StateStore(config, tmp_path / "state", f"file://{dfs}") as store:
        for version in range(3):
            commit(store, version)
    (dfs / manifest_path(2, 1)).write_text("{")
    assert misa(["ckpt", "gc", f"file://{dfs}", "--retain", "2", "--force"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "version 1" in line]
    assert len(lines) == 1 and manifest_path(2, 1) in lines[0], out
    assert (dfs / marker_path(1)).exists()


# ---------------------------------------------------------------- (c) retention stays inside its own layout
def test_retention_never_follows_a_link_nor_deletes_a_name_it_does_not_write(config, tmp_path, caplog):
    dfs = tmp_path / "dfs"
    victim = tmp_path / "victim"
    victim.mkdir()
    precious = {"precious.txt", "7.json", "000001-0123456789abcdef.sst"}
    for name in precious:
        (victim / name).write_text(name)
    caplog.set_level(logging.WARNING)
    with StateStore(config, tmp_path / "state", f"file://{dfs}") as store:
        commit(store, 0)
        (dfs / "shard-7").mkdir()
        (dfs / "shard-7" / "manifest").symlink_to(victim)  # a planted link to a folder
        (dfs / "shard-8").symlink_to(victim)
        (dfs / "shard-0" / "sst" / "000099-0123456789abcdef.sst").symlink_to(victim / "precious.txt")
        (dfs / "shard-0" / "sst" / "notes.txt").write_text("not a name the checkpoints write")
        for version in range(1, 5):
            commit(store, version, compact=version == 3)  # retainVersions is 3: GC deletes in every run
    assert misa(["ckpt", "gc", f"file://{dfs}", "--retain", "2", "--force"]) == 0
    assert {p.name for p in victim.iterdir()} == precious
    assert all((victim / name).read_text() == name for name in precious)
    assert (dfs / "shard-0" / "sst" / "notes.txt").exists()
    assert (dfs / "shard-0" / "sst" / "000099-0123456789abcdef.sst").is_symlink()
    assert any("shard-7/manifest" in r.getMessage() for r in caplog.records), "a skipped link is logged"
    assert os.path.islink(dfs / "shard-8")


def test_local_retention_never_deletes_through_a_link(config, tmp_path):
    victim = tmp_path / "victim"
    (victim / "0").mkdir(parents=True)  # named like a version's checkpoint folder
    (victim / "0" / "precious.txt").write_text("keep me")
    (victim / "0.json").write_text("keep me too")
    state = tmp_path / "state"
    with StateStore(config, state, f"file://{tmp_path / 'dfs'}") as store:
        (state / "shard-7").mkdir()
        (state / "shard-7" / "ckpt").symlink_to(victim)
        (state / "shard-7" / "manifest").symlink_to(victim)
        for version in range(5):  # retainVersions is 3: versions 0 and 1 are deleted locally
            commit(store, version)
        assert store.checkpoints.local.versions() == [2, 3, 4]
    assert (victim / "0" / "precious.txt").read_text() == "keep me"
    assert (victim / "0.json").read_text() == "keep me too"
