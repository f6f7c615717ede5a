"""`misa ckpt verify` and `misa ckpt gc`: what they check, and what they refuse."""

import os
import shutil
from pathlib import Path

import fsspec
import pytest
from fsspec.registry import _registry
from state_helpers import fill

from checkpoint.manifest import marker_path
from misa.cli import main as misa
from misa.parallel.layout import partition_locations, record_partitions
from misa.state.store import StateStore


def committed(config, state: Path, dfs: Path, versions: int = 3) -> Path:
    """``dfs`` as a file:// DFS with versions 0 .. versions - 1."""
    with StateStore(config, state, f"file://{dfs}") as store:
        for version in range(versions):
            fill(store, 300, seed=version, start=version * 150)
            store.checkpoint(version)
            store.checkpoints.upload_and_retain(version)
    return dfs


@pytest.fixture
def dfs(config, tmp_path) -> Path:
    """A file:// DFS with versions 0, 1 and 2."""
    return committed(config, tmp_path / "state", tmp_path / "dfs")


def an_sst(dfs: Path) -> Path:
    return sorted(dfs.glob("shard-0/sst/*.sst"))[0]


def error_line(capsys) -> str:
    """The one line the command printed on stderr (nothing on stdout)."""
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, (out, err)
    return err.strip()


@pytest.mark.parametrize("command", [["list"], ["verify"], ["verify", "--deep"], ["restore", "{url}", "1", "{dest}"]])
def test_every_command_fails_in_one_line_on_a_location_that_does_not_exist(tmp_path, capsys, command):
    url = f"file://{tmp_path / 'nothing-here'}"
    argv = ["ckpt", *[a.format(url=url, dest=tmp_path / "out") for a in command]]
    if "{url}" not in command:
        argv.insert(2, url)
    assert misa(argv) == 1
    assert error_line(capsys) == f"misa: error: {url} does not exist"


def test_gc_of_a_location_that_does_not_exist_deletes_nothing_and_fails(tmp_path, capsys):
    assert misa(["ckpt", "gc", str(tmp_path / "nothing-here"), "--retain", "2"]) == 1
    assert "does not exist" in error_line(capsys)


def test_a_location_without_versions_says_where_it_looked(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for command in ("list", "verify"):
        assert misa(["ckpt", command, f"file://{tmp_path / 'empty'}"]) == 1
        line = error_line(capsys)
        assert f"no committed versions in file://{tmp_path / 'empty'} nor in " in line
        assert line.endswith(f"file://{tmp_path / 'empty' / 'misa-state'}")


def test_a_spark_checkpoint_location_leads_to_its_misa_state_folder(config, tmp_path, capsys):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    committed(config, checkpoint / "misa-local", checkpoint / "misa-state", versions=2)
    assert misa(["ckpt", "list", str(checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["0", "1"]
    assert err.strip() == f"state of Spark checkpoint file://{checkpoint}: file://{checkpoint / 'misa-state'}"
    assert misa(["ckpt", "verify", str(checkpoint), "1"]) == 0
    assert "verified 1 version(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "url,status,expected",
    [
        ("gs://bucket/ckpt", 2, "pip install 'misa-pyspark[gcs]'"),  # gcsfs and adlfs are not installed here
        ("abfs://container/ckpt", 2, "pip install 'misa-pyspark[azure]'"),
        ("hdfs://namenode:8020/ckpt", 2, "libhdfs"),  # nor is a Hadoop client
        ("nosuchfs://host/ckpt", 2, "a scheme fsspec knows"),
        ("broken://bucket/ckpt", 1, "cannot read broken://bucket/ckpt: NoCredentials: unable to locate credentials"),
    ],
)
def test_a_location_no_backend_can_read_fails_in_one_line_naming_the_fix(broken_fs, capsys, url, status, expected):
    assert misa(["ckpt", "list", url]) == status
    line = error_line(capsys)
    assert line.startswith("misa: error: ") and expected in line


class NoCredentials(Exception):
    """A cloud backend's own error (botocore's NoCredentialsError is no OSError either)."""


@pytest.fixture
def broken_fs():
    """``broken://``: a backend that cannot read anything (an object store without credentials)."""

    class BrokenFileSystem(fsspec.AbstractFileSystem):
        protocol = "broken"

        def ls(self, path, detail=True, **kwargs):
            raise NoCredentials("unable to locate credentials")

    fsspec.register_implementation("broken", BrokenFileSystem, clobber=True)
    yield
    _registry.pop("broken", None)


def test_verify_of_a_version_that_never_existed_says_so(dfs, capsys):
    assert misa(["ckpt", "verify", f"file://{dfs}", "99"]) == 1
    assert error_line(capsys) == f"misa: error: version 99 does not exist; versions on file://{dfs}: 0, 1, 2"
    assert misa(["ckpt", "restore", f"file://{dfs}", "99", str(dfs.parent / "out")]) == 1
    assert error_line(capsys) == f"misa: error: version 99 does not exist; versions on file://{dfs}: 0, 1, 2"
    assert misa(["ckpt", "verify", f"file://{dfs}", "2"]) == 0
    assert "verified 1 version(s)" in capsys.readouterr().out


@pytest.mark.parametrize("how", ["delete", "truncate", "marker"])
def test_plain_verify_finds_missing_files_wrong_sizes_and_torn_markers(dfs, capsys, how):
    sst = an_sst(dfs)
    if how == "delete":
        sst.unlink()
    elif how == "truncate":
        sst.write_bytes(sst.read_bytes()[:-1])
    else:
        (dfs / marker_path(1)).write_text("{")
    assert misa(["ckpt", "verify", f"file://{dfs}"]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and (sst.name in out if how != "marker" else marker_path(1) in out)


def test_only_deep_verify_reads_every_digest(dfs, capsys):
    sst = an_sst(dfs)
    before = sst.stat()
    data = bytearray(sst.read_bytes())
    data[100] ^= 1
    sst.write_bytes(bytes(data))
    os.utime(sst, ns=(before.st_atime_ns, before.st_mtime_ns))  # bit rot: size and time unchanged
    assert misa(["ckpt", "verify", f"file://{dfs}"]) == 0
    assert "OK" in capsys.readouterr().out
    assert misa(["ckpt", "verify", "--deep", f"file://{dfs}"]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and sst.name in out and "checksum" in out


def test_verify_help_says_what_each_form_checks(capsys):
    with pytest.raises(SystemExit):
        misa(["ckpt", "verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--deep" in text and "size" in text and "SHA-256" in text


@pytest.mark.parametrize("retain", ["1", "0", "-3"])
def test_gc_needs_at_least_two_retained_versions(dfs, capsys, retain):
    with pytest.raises(SystemExit) as exit_:
        misa(["ckpt", "gc", f"file://{dfs}", "--retain", retain])
    assert exit_.value.code == 2
    assert "--retain: retain must be at least 2" in error_line(capsys)
    assert sorted(int(p.name) for p in (dfs / "_commits").iterdir()) == [0, 1, 2]


def test_gc_refuses_a_location_a_query_committed_to_just_now(config, tmp_path, capsys):
    """Files of a running query's next version are in no manifest yet: a gc then would delete them."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        store.claim("query-1")
        for version in range(3):
            fill(store, 300, seed=version, start=version * 150)
            store.checkpoint(version)
            store.checkpoints.upload_and_retain(version)
        before = sorted(p.name for p in (tmp_path / "dfs").rglob("*"))
        assert misa(["ckpt", "gc", f"file://{tmp_path / 'dfs'}", "--retain", "2"]) == 1
        out = error_line(capsys)
        assert "not collected: version 2 was committed" in out and "query query-1" in out and "--force" in out
        assert sorted(p.name for p in (tmp_path / "dfs").rglob("*")) == before
        assert misa(["ckpt", "gc", f"file://{tmp_path / 'dfs'}", "--retain", "2", "--force"]) == 0


@pytest.mark.parametrize("partitions", [2, 1])  # 1: one state host on the executors (partition-0 below the root)
def test_a_state_of_partitions_is_listed_verified_and_restored_partition_by_partition(
    config, tmp_path, capsys, partitions
):
    """A state written by worker processes or state hosts: each command runs on each partition; damage in one fails
    verify."""
    checkpoint = tmp_path / "checkpoint"
    root = f"file://{checkpoint / 'misa-state'}"
    for state, url in partition_locations(checkpoint / "misa-local", root, 2):
        committed(config, Path(state), Path(url.removeprefix("file://")), versions=2)
    record_partitions(root, 2)
    if partitions == 1:  # the same files, as a one-partition layout
        shutil.rmtree(checkpoint / "misa-state" / "partition-1")
        record_partitions(root, 1)
        assert misa(["ckpt", "verify", root]) == 0
        assert capsys.readouterr().out.count("verified 2 version(s)") == 1
        return
    assert misa(["ckpt", "verify", str(checkpoint), "--deep"]) == 0
    out = capsys.readouterr().out
    assert out.count("verified 2 version(s)") == 2 and "partition 1: " in out
    assert misa(["ckpt", "restore", str(checkpoint), "1", str(tmp_path / "restored")]) == 0
    assert sorted(p.name for p in (tmp_path / "restored").iterdir()) == ["partition-0", "partition-1"]
    assert (tmp_path / "restored" / "partition-1" / "shard-0").is_dir()
    an_sst(checkpoint / "misa-state" / "partition-1").unlink()
    capsys.readouterr()
    assert misa(["ckpt", "verify", str(checkpoint)]) == 1
    assert "DAMAGED" in capsys.readouterr().out
