"""Local-then-DFS checkpoints on a file:// DFS and on the loopback S3 server."""

import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
from state_helpers import contents, fill, key

from checkpoint.exceptions import CorruptCheckpointError, DfsUnavailableError
from common import failpoints
from misa.cli import main as misa
from misa.state.store import StateStore

HERE = Path(__file__).parent
# the repository first (its packages, not the test folders named like them), then tests/ for state_helpers
WORKER_PATH = f"{HERE.parents[1]}:{HERE.parent}"


@pytest.fixture
def store(config, tmp_path, dfs_url):
    with StateStore(config, tmp_path / "state", dfs_url) as s:
        yield s


def commit(store: StateStore, version: int) -> dict[bytes, bytes]:
    store.checkpoint(version, {"watermark": version * 10})
    store.checkpoints.upload_and_retain(version)
    return contents(store)


def test_restore_equals_checkpointed_state_from_local_and_dfs(store, config, tmp_path, dfs_url):
    fill(store, 3000, seed=1)
    v0 = commit(store, 0)
    fill(store, 500, seed=2, start=2800)
    store.write([(key(7), None)])
    v1 = commit(store, 1)
    restored = store.load(0)
    assert restored.source == "local" and restored.metadata == {"watermark": 0}
    assert contents(store) == v0
    with StateStore(config, tmp_path / "elsewhere", dfs_url) as other:  # a new host: nothing local
        restored = other.load(1)
        assert restored.source == "dfs" and contents(other) == v1
        assert other.load(0, prefer_local=False).source == "dfs" and contents(other) == v0


def test_second_version_uploads_only_new_files(store):
    fill(store, 5000, seed=3)
    store.checkpoint(0)
    first = store.checkpoints.upload_and_retain(0)
    assert first.bytes_reused == 0 and first.bytes_uploaded > 0
    fill(store, 50, seed=4, start=100)
    total = store.checkpoint(1).total_bytes
    second = store.checkpoints.upload_and_retain(1)
    assert second.bytes_reused > 0 and second.files_reused > 0
    assert second.bytes_uploaded + second.bytes_reused == total
    assert second.bytes_uploaded < total / 2


def test_transient_dfs_errors_are_retried(store):
    data = fill(store, 1000, seed=5)
    store.checkpoint(0)
    failpoints.configure("dfs.put=raise(2)")  # maxAttempts is 3
    store.checkpoints.upload_and_retain(0)
    assert store.checkpoints.newest_durable() == 0
    failpoints.configure("dfs.get=raise(2)")
    assert store.load(0, prefer_local=False).source == "dfs" and contents(store) == data


def test_permanent_errors_are_clear_and_keep_earlier_versions(store):
    v0 = fill(store, 1000, seed=6)
    commit(store, 0)
    fill(store, 1000, seed=7, start=1000)
    store.checkpoint(1)
    failpoints.configure("dfs.put=raise")
    with pytest.raises(
        DfsUnavailableError, match=r"failed after 3 attempts.*spark\.misa\.checkpoint\.retry\.maxAttempts"
    ):
        store.checkpoints.upload_and_retain(1)
    failpoints.configure("")
    assert store.checkpoints.newest_durable() == 0
    store.load(0, prefer_local=False)
    assert contents(store) == v0


@pytest.mark.parametrize("point", ["ckpt.after_upload", "ckpt.after_manifest", "dfs.put"])
def test_kill_before_the_marker_keeps_previous_version_and_gc_removes_orphans(tmp_path, point, config):
    dfs_url = f"file://{tmp_path / 'dfs'}"
    worker = [sys.executable, str(HERE / "ckpt_worker.py"), str(tmp_path / "state"), dfs_url]
    ok = subprocess.run(
        worker + ["0", "1"], capture_output=True, text=True, cwd=HERE, env={"PYTHONPATH": WORKER_PATH, "PATH": ""}
    )
    assert ok.returncode == 0, ok.stderr
    spec = f"{point}=kill" if point != "dfs.put" else "dfs.put=kill"
    killed = subprocess.run(
        worker + ["2", "2"],
        capture_output=True,
        text=True,
        cwd=HERE,
        env={"MISA_FAILPOINTS": spec, "PYTHONPATH": WORKER_PATH, "PATH": ""},
    )
    assert killed.returncode == -9
    store = StateStore(config.with_values(state_shards=2), tmp_path / "fresh", dfs_url)
    dfs = store.checkpoints.dfs
    fs, root = fsspec.core.url_to_fs(dfs_url)
    assert dfs.newest_durable() == 1 and dfs.committed_versions() == [0, 1]
    referenced = {f.remote_path(m.shard) for v in (0, 1) for m in dfs.manifests(v) for f in m.files}
    on_dfs = {p[len(root) + 1 :] for p in fs.find(root) if "/sst/" in p or "/meta/" in p or "/manifest/" in p}
    orphans = on_dfs - referenced - {f"shard-{s}/manifest/{v}.json" for s in (0, 1) for v in (0, 1)}
    if point != "dfs.put":
        assert orphans, "the killed upload left files behind"
    stats = dfs.gc(retain=3)
    after = {p[len(root) + 1 :] for p in fs.find(root) if "/sst/" in p or "/meta/" in p or "/manifest/" in p}
    assert not (after & orphans) and referenced <= after
    assert dfs.verify() == []
    store.load(1)
    assert len(contents(store)) == 2000
    store.close()
    assert stats.deleted_versions == []


def test_gc_keeps_every_file_a_retained_version_references(store, config, tmp_path, dfs_url):
    states = {}
    for version in range(7):  # retainVersions is 3
        fill(store, 400, seed=10 + version, start=version * 150)
        if version % 3 == 2:
            store.compact()  # compaction replaces files that older versions still reference
        states[version] = commit(store, version)
    assert store.checkpoints.dfs.committed_versions() == [4, 5, 6]
    assert store.checkpoints.local.versions() == [4, 5, 6]
    assert store.checkpoints.dfs.verify() == []
    with StateStore(config, tmp_path / "other", dfs_url) as other:
        for version in (4, 5, 6):
            other.load(version)
            assert contents(other) == states[version]


def _damage(dfs_url: str, how: str) -> str:
    fs, root = fsspec.core.url_to_fs(dfs_url)
    sst = sorted(p for p in fs.find(root) if p.endswith(".sst"))[0]
    data = fs.cat_file(sst)
    fs.pipe_file(sst, data[: len(data) // 2] if how == "truncate" else data[:100] + bytes([data[100] ^ 1]) + data[101:])
    return sst.rsplit("/", 1)[1]


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_damaged_dfs_file_is_detected_at_restore_and_by_verify(store, config, tmp_path, dfs_url, how, capsys):
    fill(store, 2000, seed=20)
    commit(store, 0)
    name = _damage(dfs_url, how)
    assert misa(["ckpt", "verify", "--deep", dfs_url]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and name in out
    assert misa(["ckpt", "verify", dfs_url]) == (1 if how == "truncate" else 0)  # plain verify checks sizes
    with StateStore(config, tmp_path / "other", dfs_url) as other, pytest.raises(CorruptCheckpointError, match=name):
        other.load(0)


def test_damaged_local_copy_falls_back_to_the_dfs(store):
    data = fill(store, 1500, seed=21)
    commit(store, 0)
    victim = next(store.checkpoints.local.checkpoint_dir(1, 0).glob("*.sst"))
    victim.write_bytes(victim.read_bytes()[:-10])
    restored = store.load(0)
    assert restored.source == "dfs" and contents(store) == data


def test_cli_list_restore_and_gc(store, tmp_path, dfs_url, capsys):
    import rocksdict

    for version in range(3):
        fill(store, 800, seed=30 + version, start=version * 400)
        commit(store, version)
    assert misa(["ckpt", "list", dfs_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["0", "1", "2"]
    assert misa(["ckpt", "restore", dfs_url, "2", str(tmp_path / "out")]) == 0
    restored = {}
    for shard in range(store.shards):
        db = rocksdict.Rdict(str(tmp_path / "out" / f"shard-{shard}"), rocksdict.Options(raw_mode=True))
        restored.update(db.items())
        db.close()
    assert restored == contents(store)
    assert misa(["ckpt", "gc", dfs_url, "--retain", "2", "--force"]) == 0
    assert "deleted versions [0]" in capsys.readouterr().out
    assert misa(["ckpt", "verify", "--deep", dfs_url]) == 0
