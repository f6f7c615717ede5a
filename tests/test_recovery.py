"""Reconciling the state store with Spark's offsets and commits logs (DESIGN section 5)."""
from pathlib import Path

import pytest

from misa.recovery import RecoveryError, reconcile
from misa.state_store import EMPTY_VERSION, StateStore
from state_helpers import fill


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
            s.upload(version)
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
    with pytest.raises(RecoveryError, match="Spark committed batch 5 but the newest durable state version is 2"):
        reconcile(store, str(tmp_path / "ckpt"))
