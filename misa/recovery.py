"""Reconcile the state store with Spark's checkpoint before the query starts (DESIGN section 5)."""
from __future__ import annotations

import logging

from checkpoint import failpoints
from checkpoint.location import Location, parse, redact

from .spark_log import SparkCheckpointLog
from .state_store import EMPTY_VERSION, StateStore

log = logging.getLogger(__name__)


class RecoveryError(RuntimeError):
    """Spark's checkpoint and the state store disagree in a way the protocol rules out."""


def reconcile(store: StateStore, checkpoint_location: str | Location) -> int:
    """The state version that Spark will continue from (the caller loads it).

    V = the newest version that is durable, or newer and valid locally (uploaded first); C = Spark's
    last committed batch. C == V: resume. C == V - 1: roll back to C (checked restorable first).
    C == V + 1: make Spark replay C. Anything else fails before anything is changed.
    """
    location = parse(checkpoint_location)
    spark = SparkCheckpointLog(location)
    c = spark.last_committed()
    durable = store.checkpoints.newest_durable()
    v = EMPTY_VERSION if durable is None else durable
    newer_local = [n for n in store.checkpoints.local.versions() if n > v and not store.checkpoints.local.problems(n)]
    v = max(newer_local, default=v)
    if not v - 1 <= c <= v + 1:
        raise RecoveryError(_gap_message(c, v, location, store))
    target = min(c, v)
    if c == v - 1:
        problems = store.restore_problems(c)
        if problems:
            raise RecoveryError(
                f"Spark's last committed batch is {c}, so the state must roll back from version {v} to {c}, but "
                f"version {c} cannot be restored: {'; '.join(problems)}. Nothing was changed: version {v} is kept. "
                f"Restore the DFS copy of version {c} (misa ckpt list / verify {redact(store.checkpoints.dfs.url)}), or "
                f"start the query from a new checkpoint location with new state locations.")
    for local in newer_local:
        if local <= target:
            log.info("uploading locally committed version %d before recovery", local)
            store.upload(local)
    if c == v + 1:
        log.warning("batch %d's state commit was in flight: Spark replays it", c)
        spark.make_spark_replay(c)
    elif c == v - 1:
        log.warning("rolling the state back from version %d to Spark's last committed batch %d", v, c)
        failpoints.hit("recovery.before_rollback")
        store.forget_after(c)
    return target


def _gap_message(c: int, v: int, location: Location, store: StateStore) -> str:
    if c == EMPTY_VERSION:
        spark_side = f"Spark's checkpoint at {location} has no committed batch"
    else:
        spark_side = f"Spark's last committed batch is {c} (checkpoint at {location})"
    state = f"local {store.root}, DFS {redact(store.checkpoints.dfs.url)}"
    if c > v + 1:
        cause = f"state for batches {v + 1}..{c - 1} is missing"
    else:
        cause = "the state is ahead of Spark by more than the one version the commit protocol allows"
    return (
        f"{spark_side} but the state is at version {v} ({state}): {cause}. "
        f"Nothing was changed. Usual causes: a mistyped checkpoint location, two queries sharing "
        f"spark.misa.state.dir or spark.misa.checkpoint.dfsUrl, or one of the two restored from an older copy. "
        f"Point the query at its own checkpoint location and state locations, or start from a new checkpoint "
        f"location with new state locations."
    )
