"""`misa ckpt verify` and `misa ckpt gc`: what they check, and what they refuse."""

import os
from pathlib import Path

import pytest
from state_helpers import fill

from checkpoint.manifest import marker_path
from misa.cli import main as misa
from misa.state.store import StateStore


@pytest.fixture
def dfs(config, tmp_path) -> Path:
    """A file:// DFS with versions 0, 1 and 2."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        for version in range(3):
            fill(store, 300, seed=version, start=version * 150)
            store.checkpoint(version)
            store.upload_and_retain(version)
    return tmp_path / "dfs"


def an_sst(dfs: Path) -> Path:
    return sorted(dfs.glob("shard-0/sst/*.sst"))[0]


def test_verify_of_a_location_that_does_not_exist_fails(tmp_path, capsys):
    assert misa(["ckpt", "verify", f"file://{tmp_path / 'nothing-here'}"]) == 1
    out = capsys.readouterr().out
    assert "OK" not in out and "does not exist" in out


def test_verify_of_a_location_without_versions_fails(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert misa(["ckpt", "verify", f"file://{tmp_path / 'empty'}"]) == 1
    out = capsys.readouterr().out
    assert "OK" not in out and "no committed versions" in out


def test_verify_of_a_version_that_never_existed_says_so(dfs, capsys):
    assert misa(["ckpt", "verify", f"file://{dfs}", "99"]) == 1
    out = capsys.readouterr().out
    assert "version 99 does not exist" in out and "DAMAGED" not in out
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
    assert "at least 2" in capsys.readouterr().err
    assert sorted(int(p.name) for p in (dfs / "_commits").iterdir()) == [0, 1, 2]


def test_gc_refuses_a_location_a_query_committed_to_just_now(config, tmp_path, capsys):
    """Files of a running query's next version are in no manifest yet: a gc then would delete them."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        store.claim("query-1")
        for version in range(3):
            fill(store, 300, seed=version, start=version * 150)
            store.checkpoint(version)
            store.upload_and_retain(version)
        before = sorted(p.name for p in (tmp_path / "dfs").rglob("*"))
        assert misa(["ckpt", "gc", f"file://{tmp_path / 'dfs'}", "--retain", "2"]) == 1
        out = capsys.readouterr().out
        assert "not collected: version 2 was committed" in out and "query query-1" in out and "--force" in out
        assert sorted(p.name for p in (tmp_path / "dfs").rglob("*")) == before
        assert misa(["ckpt", "gc", f"file://{tmp_path / 'dfs'}", "--retain", "2", "--force"]) == 0
