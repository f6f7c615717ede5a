"""Reconcile the state store with Spark's checkpoint before the query starts (DESIGN section 5)."""

from __future__ import annotations

import logging

from checkpoint.exceptions import CorruptCheckpointError, ShardCountError
from common import failpoints
from common.location import Location, parse
from misa.exceptions import RecoveryError
from misa.runtime.spark_log import SparkCheckpointLog
from misa.runtime.spark_mirror import LOCAL_COPY
from misa.state.store import EMPTY_VERSION, StateStore

log = logging.getLogger(__name__)


def require_fresh(store: StateStore, checkpoint_location: str | Location) -> None:
    """For ``nocommit``, which keeps nothing durable: refuse to start over a query or state that has history."""
    location = parse(checkpoint_location)
    c = SparkCheckpointLog(location).last_committed()
    versions = store.checkpoints.retained_versions() + store.checkpoints.locally_committed_after(EMPTY_VERSION)
    if c != EMPTY_VERSION or versions:
        raise RecoveryError(
            f"spark.misa.commit.mode=nocommit keeps no durable state, so it cannot recover, but Spark's checkpoint at "
            f"{location} has committed batch {c} and the state ({store.locations}) has "
            f"versions {sorted(set(versions))}. Use a new checkpoint location and new state locations for a "
            f"nocommit run."
        )


def reconcile(store: StateStore, checkpoint_location: str | Location, allow_previous: bool = False) -> int:
    """The state version that Spark will continue from, loaded into ``store`` (``store.metadata`` holds
    its operator metadata); ``allow_previous`` is ``spark.misa.recovery.allowPreviousVersion``.

    V = the newest version that is durable, or newer and valid locally (uploaded first); C = Spark's
    last committed batch. C == V: resume. C == V - 1: roll back to C (checked restorable first).
    C == V + 1: make Spark replay C. Anything else fails before anything is changed. The target is
    restored before Spark's logs or any marker change, so a restore that fails changes nothing.
    """
    location = parse(checkpoint_location)
    spark = SparkCheckpointLog(location)
    c = spark.last_committed()
    checkpoints = store.checkpoints
    durable = checkpoints.newest_durable()
    v = EMPTY_VERSION if durable is None else durable
    newer_local = checkpoints.locally_committed_after(v)
    v = max(newer_local, default=v)
    if not v - 1 <= c <= v + 1 or (v != EMPTY_VERSION and not spark.batch_ids("offsets")):
        raise RecoveryError(_gap_message(c, v, location, store))
    target = _load_target(store, min(c, v), c, v, allow_previous)
    for local in newer_local:
        if local <= target:
            log.info("uploading locally committed version %d before recovery", local)
            checkpoints.upload_and_retain(local)
    checkpoints.start_repair()
    spark.remove_abandoned_temp_files()
    if c > target:
        log.warning(
            "Spark's batches %d..%d are replayed from its logged offsets (state version %d)", target + 1, c, target
        )
        spark.make_spark_replay(target + 1)
    else:
        spark.forget_unplanned_source_entries()
    if v > target:
        log.warning("rolling the state back from version %d to %d", v, target)
        failpoints.hit("recovery.before_rollback")
        checkpoints.forget_after(target)
    return target


def _load_target(store: StateStore, wanted: int, c: int, v: int, allow_previous: bool) -> int:
    """Load ``wanted`` (its restore checks every file it reads); when it cannot be restored, with
    ``allow_previous`` (spark.misa.recovery.allowPreviousVersion), the newest older retained version that can; else a
    RecoveryError. Only the working state changes before that."""
    try:
        store.load(wanted)
        return wanted
    except (CorruptCheckpointError, ShardCountError) as exc:
        problem = str(exc)
    older = [n for n in reversed(store.checkpoints.retained_versions()) if n < wanted and not store.restore_problems(n)]
    if allow_previous and older:
        log.warning(
            "version %d cannot be restored (%s); starting from version %d as "
            "spark.misa.recovery.allowPreviousVersion allows",
            wanted,
            problem,
            older[0],
        )
        store.load(older[0])
        return older[0]
    option = (
        f"Version {older[0]} can be restored: set spark.misa.recovery.allowPreviousVersion=true to start from "
        f"it (Spark then replays batches {older[0] + 1}..{c} from its source, which must still hold them)"
        if older
        else "No older retained version can be restored either"
    )
    raise RecoveryError(
        f"Spark's last committed batch is {c} and the state's newest version is {v}, so recovery needs version "
        f"{wanted}, but {problem} Spark's checkpoint and the markers were not changed. {option}; or check the "
        f"DFS copy (misa ckpt verify {store.checkpoints.dfs.shown})."
    )


def _gap_message(c: int, v: int, location: Location, store: StateStore) -> str:
    if c == EMPTY_VERSION:
        spark_side = f"Spark's checkpoint at {location} has no committed batch"
    else:
        spark_side = f"Spark's last committed batch is {c} (checkpoint at {location})"
    if c > v + 1:
        cause = f"state for batches {v + 1}..{c - 1} is missing"
    elif c == EMPTY_VERSION and v != EMPTY_VERSION:
        cause = "Spark's checkpoint is new (no batch was ever planned), so this state belongs to another query"
    else:
        cause = "the state is ahead of Spark by more than the one version the commit protocol allows"
    return (
        f"{spark_side} but the state is at version {v} ({store.locations}): {cause}. "
        f"Nothing was changed. Usual causes: a mistyped checkpoint location, two queries sharing "
        f"spark.misa.state.dir or spark.misa.checkpoint.dfsUrl, or one of the two restored from an older copy. "
        f"Point the query at its own checkpoint location and state locations, or start from a new checkpoint "
        f"location with new state locations.{_local_copy_remedy(location)}"
    )


def _local_copy_remedy(location: Location) -> str:
    """The remedy when Spark's checkpoint is the runtime's local copy (``mirrorSparkLog``), which a run that wrote the
    checkpoint location itself (or a hand edit there) can leave behind."""
    if location.local is None or location.local.name != LOCAL_COPY:
        return ""
    index = location.local.with_name(f"{LOCAL_COPY}.json")
    return (
        f" Spark's checkpoint read here is the local copy {location.local}: if the checkpoint location was written "
        f"since by another run or by hand, remove {index} so that the next start takes the checkpoint location "
        "as it is."
    )


def batch_gap_message(batch_id: int, version: int, location: Location, store: StateStore) -> str:
    """Why Spark's batch ``batch_id`` cannot run on state ``version`` (not ``batch_id - 1``)."""
    return (
        f"Spark runs batch {batch_id} (checkpoint at {location}) but the state is at version {version} "
        f"({store.locations}): the state of batches {version + 1}..{batch_id - 1} is not there. Nothing "
        f"was written for batch {batch_id}. Usual causes: another driver of this query ran those batches after this "
        f"one recovered (a standby started while the old driver still ran), or two queries share the state "
        f"locations. Stop every other driver of this query, then restart it: recovery reconciles the state with "
        f"Spark's checkpoint."
    )
