"""The state version a job is at, kept continuous with Spark's batch ids (recovery's side inside a running query).

Each batch must follow the state's version: a replayed batch rewinds the state to the version before it (newer
versions forgotten on both levels first), a gap fails the batch before anything is written. A version loaded
(at the start, by recovery, or by a rewind) is adopted: refused when an incompatible operator wrote it, else the
operator's metadata restored and no stale cache or hints kept.
"""

from __future__ import annotations

import logging

from checkpoint.exceptions import CorruptCheckpointError
from common import failpoints
from common.location import Location
from misa.exceptions import RecoveryError
from misa.runtime.compat import check_compatible
from misa.runtime.job_parts import JobParts
from misa.runtime.recovery import batch_gap_message
from misa.state.store import EMPTY_VERSION

log = logging.getLogger(__name__)


class StateContinuity:
    """The version of ``parts``' state the job is at (``version``: the last batch whose state is committed, or
    loaded), and the checks that keep each batch continuous with it."""

    def __init__(self, parts: JobParts, checkpoint_location: Location):
        self._parts = parts
        self._checkpoint_location = checkpoint_location
        self.version = parts.store.version
        self._awaiting_first_batch = False

    def expect_first_batch(self) -> None:
        """A query starts: its first batch checks this driver's claim again."""
        self._awaiting_first_batch = True

    def check(self, batch_id: int) -> bool:
        """Batch ``batch_id`` must follow the state's version: a replay rebuilds from the version before it;
        a gap fails the batch before anything is written. At the query's first batch this driver's claim
        is checked again (a driver started after it supersedes it), and a version another driver made
        durable since recovery is loaded when it is exactly the one this batch follows. True for the first
        batch of the start."""
        first, self._awaiting_first_batch = self._awaiting_first_batch, False
        checkpoints = self._parts.checkpoints
        if first:
            checkpoints.check_owner()
        if batch_id <= self.version:  # a replay: rebuild from the version before it
            self._rewind(batch_id - 1)
            return first
        if batch_id == self.version + 1:
            return first
        durable = checkpoints.newest_durable()
        if first and durable == batch_id - 1 and not self._parts.store.restore_problems(durable):
            log.warning("version %d became durable after recovery; continuing from it", durable)
            self._load(durable)
            return first
        raise RecoveryError(batch_gap_message(batch_id, self.version, self._checkpoint_location, self._parts.store))

    def committed(self, batch_id: int) -> None:
        """Batch ``batch_id``'s state is committed: the job is at its version."""
        self.version = batch_id

    def adopt_loaded(self) -> None:
        """Continue from the version just loaded into the store (refused if an incompatible operator wrote it):
        its operator metadata, no stale cache or hints."""
        parts, store = self._parts, self._parts.store
        if store.operator is not None and store.version != EMPTY_VERSION:
            check_compatible(store.loaded_operator, store.operator, store.version, store.locations)
        parts.operator.restore(store.metadata)
        if parts.hints is not None:
            parts.hints.drop_ahead()
        parts.view.reset()  # discard anything a failed attempt left behind
        self.version = store.version
        parts.controller.loaded(self.version)

    def _load(self, version: int) -> None:
        self._parts.store.load(version)
        self.adopt_loaded()

    def _rewind(self, version: int) -> None:
        """Go back to ``version`` inside the running query: newer versions are forgotten (markers on
        both levels first) before the replay rebuilds them, never overwritten while they count."""
        log.warning("batch %d replayed; reloading state version %d", version + 1, version)
        self._parts.controller.drain()
        problems = self._parts.store.restore_problems(version)
        if problems:
            raise CorruptCheckpointError(
                f"batch {version + 1} is replayed but version {version} cannot be restored: {'; '.join(problems)}"
            )
        self._parts.checkpoints.forget_after(version)
        failpoints.hit("replay.after_forget")
        self._load(version)
