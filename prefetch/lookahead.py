"""Adaptive lookahead: which of a job's candidate upstream stages the hints are extracted from, and when.

A job may declare several stages that can yield its state keys, earliest first. An earlier stage
gives hints sooner (more slack) but may name keys the stateful stage never reads (rows a later
filter drops), which are wasted prefetches. :class:`LookaheadSelector` starts with the earliest
stage and moves to the next one when the wasted share of prefetches stays above a threshold.

Hints have two sources in time: *ahead* (between batches, from the next batch's input as it
arrives: free, as the driver and the executors idle) and *in the batch* (a hint job beside the
batch's own compute: it costs the batch cores, but names exactly the batch's rows).
:class:`HintTiming` prefers ahead, and goes back to in-batch hints while ahead's measured outcome is
poor (too many of its prefetches never read, or too many of its hits read before their fetch ended)
and in-batch hints were measured to do clearly better; it tries ahead again after a while.
"""

from __future__ import annotations


def wasted_share(prefetched: int, wasted: int) -> float:
    """The share of a batch's prefetches that it never read (0 without prefetches)."""
    return wasted / prefetched if prefetched else 0.0


class LookaheadSelector:
    """Chooses the hint stage from the wasted-prefetch ratio of the batches it observed."""

    def __init__(self, stages: int, wasted_threshold: float, patience: int = 2, min_prefetches: int = 100):
        if stages < 1:
            raise ValueError(f"stages must be at least 1, not {stages}")
        if not 0.0 <= wasted_threshold <= 1.0:
            raise ValueError(f"wasted_threshold must be in [0, 1], not {wasted_threshold}")
        self.stages = stages
        self.threshold = wasted_threshold
        self.patience = patience
        self.min_prefetches = min_prefetches
        self.current = 0
        self._strikes = 0

    def observe(self, prefetched: int, wasted: int) -> int:
        """Record one batch of the current stage; returns the stage to use for the next batch.

        Batches with fewer than ``min_prefetches`` prefetches say too little and are ignored.
        """
        if prefetched < self.min_prefetches:
            return self.current
        if wasted_share(prefetched, wasted) > self.threshold:
            self._strikes += 1
        else:
            self._strikes = 0
        if self._strikes >= self.patience and self.current + 1 < self.stages:
            self.current += 1
            self._strikes = 0
        return self.current


AHEAD, IN_BATCH = "ahead", "in-batch"


class HintTiming:
    """Chooses the hint source of the next batch (:data:`AHEAD` or :data:`IN_BATCH`) from measured outcomes.

    A batch's *miss score* is the share of its prefetches never read (wasted) plus the share of its
    prefetch hits read before their fetch ended (late). Ahead is used while its score stays within the
    thresholds. After ``patience`` poor batches in a row, in-batch hints are tried for ``patience``
    batches; they are kept (for ``retry_after`` batches) only if their mean score is lower than
    ahead's by at least ``margin``, since they cost the batch a hint job. Otherwise (e.g. a cache too
    small for a batch's keys wastes prefetches from either source) ahead is used again and not
    questioned for ``retry_after`` batches."""

    def __init__(
        self,
        wasted_threshold: float,
        late_threshold: float = 0.5,
        patience: int = 2,
        retry_after: int = 20,
        margin: float = 0.1,
        min_prefetches: int = 100,
    ):
        if not 0.0 <= wasted_threshold <= 1.0 or not 0.0 <= late_threshold <= 1.0:
            raise ValueError(f"thresholds must be in [0, 1], not {wasted_threshold} and {late_threshold}")
        self.wasted_threshold = wasted_threshold
        self.late_threshold = late_threshold
        self.patience = patience
        self.retry_after = retry_after
        self.margin = margin
        self.min_prefetches = min_prefetches
        self.current = AHEAD
        self._scores: dict[str, list[float]] = {AHEAD: [], IN_BATCH: []}  # the current run of each source
        self._settled = 0  # batches left before the choice may change again

    def observe(self, source: str, prefetched: int, wasted: int, hits: int, late: int) -> str:
        """Record one batch hinted from ``source``; returns the source for the next batch (batches with
        fewer than ``min_prefetches`` prefetches, or from another source than the current, are ignored)."""
        if self._settled:
            self._settled -= 1
            if not self._settled:
                self.current = AHEAD
            return self.current
        if source != self.current or prefetched < self.min_prefetches:
            return self.current
        waste, late_share = wasted_share(prefetched, wasted), late / hits if hits else 0.0
        scores = self._scores[source]
        if source == AHEAD:
            poor = waste > self.wasted_threshold or late_share > self.late_threshold
            scores[:] = [*scores, waste + late_share] if poor else []
            if len(scores) >= self.patience:
                self.current = IN_BATCH
            return self.current
        scores.append(waste + late_share)
        if len(scores) >= self.patience:
            ahead, in_batch = self._scores[AHEAD], scores
            better = sum(in_batch) / len(in_batch) <= sum(ahead) / len(ahead) - self.margin
            self.current = IN_BATCH if better else AHEAD
            self._scores = {AHEAD: [], IN_BATCH: []}
            self._settled = self.retry_after
        return self.current
