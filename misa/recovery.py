"""Reconcile the state store with Spark's checkpoint before the query starts (DESIGN section 5)."""
from __future__ import annotations

import logging
from pathlib import Path

from .state_store import EMPTY_VERSION, StateStore

log = logging.getLogger(__name__)


class RecoveryError(RuntimeError):
    """Spark's checkpoint and the state store disagree in a way the protocol rules out."""


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _remove_log_entry(folder: Path, batch_id: int) -> None:
    (folder / str(batch_id)).unlink(missing_ok=True)
    (folder / f".{batch_id}.crc").unlink(missing_ok=True)


def reconcile(store: StateStore, checkpoint_location: str) -> int:
    """The state version that Spark will continue from (the caller loads it).

    V = newest durable version (locally committed newer versions are uploaded first),
    C = Spark's last committed batch. C == V: resume. C < V: roll back to C. C == V+1: make Spark
    replay C by removing its commit entry and any later offsets. C > V+1: fail loudly.
    """
    spark_dir = Path(checkpoint_location.removeprefix("file://"))
    commits, offsets = spark_dir / "commits", spark_dir / "offsets"
    c = max(_batch_ids(commits), default=EMPTY_VERSION)
    durable = store.checkpoints.newest_durable()
    v = EMPTY_VERSION if durable is None else durable
    for local in store.checkpoints.local.versions():
        if local > v and not store.checkpoints.local.problems(local):
            log.info("uploading locally committed version %d before recovery", local)
            store.upload(local)
            v = local
    if c > v + 1:
        raise RecoveryError(
            f"Spark committed batch {c} but the newest durable state version is {v}: state for batches "
            f"{v + 1}..{c - 1} is lost. Was the state directory or DFS location changed? Start from a new "
            f"checkpoint location or restore the DFS copy."
        )
    if c == v + 1:
        log.warning("batch %d's state commit was in flight: Spark replays it", c)
        _remove_log_entry(commits, c)
        for batch_id in _batch_ids(offsets):
            if batch_id > c:
                _remove_log_entry(offsets, batch_id)
        target = v
    else:
        target = c
        if c < v:
            log.warning("rolling the state back from version %d to Spark's last committed batch %d", v, c)
            store.checkpoints.forget_after(c)
    return target
