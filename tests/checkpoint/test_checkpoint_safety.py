"""A tampered or damaged checkpoint never writes outside its folder, credentials never reach a
message, markers count only once on disk, and a restore that cannot succeed says so plainly."""

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest
from state_helpers import contents, fill

from checkpoint import RetryPolicy
from checkpoint.exceptions import CorruptCheckpointError, DfsUnavailableError
from checkpoint.manifest import ShardManifest, manifest_path, marker_path
from misa.cli import main as misa
from misa.state.store import StateStore


@pytest.fixture
def store(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as s:
        for version in range(3):
            fill(s, 200, seed=version, start=version * 100)
            s.checkpoint(version)
            s.checkpoints.upload_and_retain(version)
        yield s


def tamper_dfs(dfs: Path, version: int, change) -> None:
    """Rewrite shard 0's DFS manifest of ``version`` with ``change(raw)`` and re-sign the marker, as an
    attacker who can write the DFS would."""
    path = dfs / manifest_path(0, version)
    raw = json.loads(path.read_bytes())
    change(raw)
    path.write_bytes(json.dumps(raw, sort_keys=True).encode())
    marker = json.loads((dfs / marker_path(version)).read_bytes())
    marker["manifest_sha256"][0] = hashlib.sha256(path.read_bytes()).hexdigest()
    (dfs / marker_path(version)).write_bytes(json.dumps(marker).encode())


@pytest.mark.parametrize("name", ["../../../evil.sst", "/tmp/evil-abs.sst", "..", "a/b.sst", ""])
def test_a_manifest_naming_a_file_outside_its_folder_is_refused(store, tmp_path, name):
    tamper_dfs(tmp_path / "dfs", 2, lambda raw: raw["files"][0].update(name=name))
    dest = tmp_path / "restore" / "shard-0"
    with pytest.raises((ValueError, CorruptCheckpointError), match="file name"):
        store.checkpoints.restore(2, [tmp_path / "restore" / f"shard-{s}" for s in range(3)], prefer_local=False)
    assert not (tmp_path / "evil.sst").exists() and not Path("/tmp/evil-abs.sst").exists()
    assert not [p for p in (tmp_path / "restore").rglob("*") if p.is_file() and not p.is_relative_to(dest.parent)]


def test_a_manifest_with_a_shard_out_of_range_is_refused(store, tmp_path):
    tamper_dfs(tmp_path / "dfs", 2, lambda raw: raw.update(shard=7))
    with pytest.raises((ValueError, CorruptCheckpointError), match="shard"):
        store.checkpoints.restore(2, [tmp_path / "r" / f"shard-{s}" for s in range(3)], prefer_local=False)


def test_a_damaged_download_never_lands_under_its_real_name(store, tmp_path):
    manifest = ShardManifest.from_json((tmp_path / "dfs" / manifest_path(0, 2)).read_bytes())
    sst = next(f for f in manifest.files if f.name.endswith(".sst"))
    remote = tmp_path / "dfs" / sst.remote_path(0)
    remote.write_bytes(b"\0" * remote.stat().st_size)
    dests = [tmp_path / "r" / f"shard-{s}" for s in range(3)]
    with pytest.raises(CorruptCheckpointError):
        store.checkpoints.restore(2, dests, prefer_local=False)
    assert not (dests[0] / sst.name).exists()


def test_ckpt_restore_of_a_tampered_manifest_exits_with_a_clear_error(store, tmp_path, capsys):
    tamper_dfs(tmp_path / "dfs", 2, lambda raw: raw["files"][0].update(name="../../evil.sst"))
    assert misa(["ckpt", "restore", f"file://{tmp_path / 'dfs'}", "2", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err  # one line on stderr, as every misa error
    assert "version 2" in err and "file name" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "evil.sst").exists()


# ---------------------------------------------------------------- credentials
def test_credentials_in_a_dfs_url_reach_no_error_and_no_log_line(caplog):
    url = "sftp://alice:S3CRET@127.0.0.1:1/ckpt?sig=T0KEN"

    def fail():
        raise ConnectionError(f"cannot connect to {url}")

    caplog.set_level(logging.DEBUG)
    with pytest.raises(DfsUnavailableError) as err:
        RetryPolicy(max_attempts=2, initial_backoff_s=0.001, jitter_s=0).call(f"upload to {url}", fail)
    shown = str(err.value) + "".join(r.getMessage() for r in caplog.records)
    assert "S3CRET" not in shown and "T0KEN" not in shown and "alice:***@127.0.0.1" in shown


# ---------------------------------------------------------------- durability of markers
def test_a_local_marker_counts_only_after_its_bytes_and_folder_are_synced(store, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    fill(store, 10, seed=9, start=900)
    store.checkpoint(3)
    marker = str(store.checkpoints.local.root / marker_path(3))
    at = events.index(("replace", marker))
    assert events[at - 1][0] == "fsync" and events[at - 1][1].endswith(".tmp")  # the marker's bytes
    assert events[at + 1] == ("fsync", str(Path(marker).parent))  # then its folder
    manifest = str(store.checkpoints.local.root / manifest_path(0, 3))
    assert events.index(("replace", manifest)) < at


# ---------------------------------------------------------------- wrong shapes fall back, or say so plainly
@pytest.mark.parametrize("shape", ['{"files": 3}', "[1, 2]", '{"version": 2, "shard": 0, "files": [{"name": 1}]}'])
def test_a_local_manifest_of_the_wrong_shape_falls_back_to_the_dfs(store, tmp_path, shape):
    expected = contents(store)
    (store.checkpoints.local.root / manifest_path(1, 2)).write_text(shape)
    restored = store.load(2)
    assert restored is not None and restored.source == "dfs" and contents(store) == expected


def test_a_dfs_marker_of_the_wrong_shape_is_not_a_commit(store, tmp_path):
    (tmp_path / "dfs" / marker_path(2)).write_text('{"version": "two", "manifest_sha256": 5, "created": []}')
    assert store.checkpoints.dfs.newest_durable() == 1


def test_a_newest_version_restorable_from_neither_level_is_named_with_the_previous_one(store, tmp_path):
    (store.checkpoints.local.root / manifest_path(0, 2)).write_text('{"files": 3}')
    (tmp_path / "dfs" / manifest_path(0, 2)).write_text("[]")
    with pytest.raises(
        CorruptCheckpointError,
        match=r"version 2 cannot be restored from either level.*"
        r"local:.*DFS:.*previous retained version is 1",
    ):
        store.load(2)


def test_a_version_written_with_another_shard_count_is_refused_on_the_local_path(store, config, tmp_path):
    fewer = config.with_values(state_shards=2)
    store.close()  # the same local state directory, opened with fewer shards
    with StateStore(fewer, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as other:
        with pytest.raises(ValueError, match=r"version 2 was written with 3 shards.*spark\.misa\.state\.shards is 2"):
            other.load(2)
