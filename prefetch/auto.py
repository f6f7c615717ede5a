"""``spark.misa.prefetch.enabled=auto``: turn keyed prefetching on where it pays and off where it does not.

After each batch, :func:`decide` looks at what the batches so far cost and chooses prefetching on or
off for the next one. Two measurements drive it:

* **What hints could hide.** Without prefetching, a batch's state read time is the most prefetching
  can take off it, and only where the reads wait on a device: reads served from memory (RocksDB's
  memtables and block cache, the OS page cache) are CPU work, which a hint thread on the same cores
  would only move. While the read is below ``min_read_share`` of the batch (state in memory: CM2
  reads 6 ms of a 0.47 s batch), or the batch's reads fetched less than ``min_device_bytes`` from a
  device (LR2 at 28,000 records/s reads 0.2 s of a 1 s batch, all from memory: a probe there cost
  batches of 3 s), prefetching stays off and nothing is tried, so the default regime runs exactly
  as with prefetching off.
* **What the batch pays either way.** A batch's *cost* is the driver's time the prefetching changes:
  Spark's compute (an in-batch hint job shares its cores), the wait for hints, the state read and
  the merge (the state cache's bookkeeping), per input row. Prefetching on is compared with off by
  the median cost of each one's latest batches.

Hysteresis: prefetching is tried (a *probe*) only after ``patience`` batches in a row read at least
``min_read_share`` of their time; a probe runs ``1 + patience`` batches with prefetching, the first
warming the cache (not measured), and keeps it on only if it cost at most ``1 - margin`` of off.
A probe that did not pay is retried after ``probe_every`` batches, twice that after a second,
and so on up to ``max_cooldown``. While on, prefetching is turned off when ``patience`` batches in
a row each cost more than off; every ``recheck_every`` batches one batch runs without it, to
measure off again (the state may have shrunk into memory): prefetching stays off if that batch read
less than ``min_read_share`` or cost less than the last ``patience`` batches with prefetching.

The decision is a pure function of an :class:`AutoState` and the batches seen (:class:`Sample`), so it
can be tested on synthetic metrics; :class:`AutoPrefetch` keeps both between batches.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, replace
from typing import Sequence

OFF, PROBE, ON, RECHECK = "off", "probe", "on", "recheck"
"""Phases: off; trying prefetching; on; one batch off to measure off again."""


@dataclass(frozen=True)
class Sample:
    """One batch as auto sees it (seconds); ``on``: prefetching was on in it."""

    on: bool
    rows: int  # input rows
    batch_s: float
    compute_s: float = 0.0
    hint_wait_s: float = 0.0
    read_s: float = 0.0
    apply_s: float = 0.0
    device_bytes: int | None = None  # read from a device during the state reads; None: not accounted

    @property
    def cost(self) -> float:
        """Seconds per input row of the batch's work that prefetching changes."""
        return (self.compute_s + self.hint_wait_s + self.read_s + self.apply_s) / self.rows

    @property
    def read_share(self) -> float:
        """The state read's share of the batch: the most that hints could hide."""
        return self.read_s / self.batch_s if self.batch_s > 0 else 0.0


@dataclass(frozen=True)
class AutoPolicy:
    """The thresholds of the decision (see the module docstring)."""

    min_read_share: float = 0.1
    min_device_bytes: int = 256 * 1024
    patience: int = 3
    margin: float = 0.1
    window: int = 5  # latest measured batches of each mode compared
    probe_every: int = 20
    max_cooldown: int = 640
    recheck_every: int = 100

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_read_share <= 1.0 or not 0.0 <= self.margin < 1.0:
            raise ValueError(f"min_read_share and margin must be fractions, not {self.min_read_share}, {self.margin}")
        if self.min_device_bytes < 0:
            raise ValueError(f"min_device_bytes must not be negative, not {self.min_device_bytes}")
        if min(self.patience, self.window, self.probe_every, self.max_cooldown, self.recheck_every) < 1:
            raise ValueError("patience, window, probe_every, max_cooldown and recheck_every must be at least 1")


@dataclass(frozen=True)
class AutoState:
    """Where auto stands between two batches."""

    phase: str = OFF
    agree: int = 0  # batches in a row that point to a switch
    left: int = 0  # probe batches still to run
    cooldown: int = 0  # batches before the next probe may start
    failed: int = 0  # probes in a row that did not pay
    since_recheck: int = 0  # batches on since off was last measured

    @property
    def on(self) -> bool:
        """Whether the next batch prefetches."""
        return self.phase in (PROBE, ON)


@dataclass(frozen=True)
class Decision:
    """The choice for the next batch, why, and the numbers it was made on."""

    state: AutoState
    reason: str
    read_share: float | None = None  # of the batch just measured
    ratio: float | None = None  # cost with prefetching / without, when compared

    @property
    def on(self) -> bool:
        return self.state.on


def decide(state: AutoState, history: Sequence[Sample], policy: AutoPolicy = AutoPolicy()) -> Decision:
    """Prefetching on or off for the next batch, given ``state`` and the batches so far (the last one
    just ended, run as ``state`` said). A batch without rows measures nothing and changes nothing."""
    if not history:
        return Decision(state, "no batch measured yet")
    last = history[-1]
    if last.rows <= 0:
        return Decision(state, "no rows: nothing measured")
    if state.phase == OFF:
        return _off(state, last, policy)
    if state.phase == PROBE:
        return _probe(state, history, policy)
    if state.phase == ON:
        return _on(state, history, policy)
    return _recheck(state, history, policy)


def _cheap_reads(sample: Sample, policy: AutoPolicy) -> str | None:
    """Why prefetching could not pay for ``sample``'s reads (run without prefetching), or None if it could."""
    if sample.read_share < policy.min_read_share:
        return f"reads cheap: {sample.read_share:.1%} of the batch (< {policy.min_read_share:.0%})"
    if sample.device_bytes is not None and sample.device_bytes < policy.min_device_bytes:
        return (
            f"reads from memory: {sample.read_share:.1%} of the batch, {sample.device_bytes / 1024:.0f} KiB "
            f"from a device (< {policy.min_device_bytes / 1024:.0f} KiB)"
        )
    return None


def _off(state: AutoState, last: Sample, policy: AutoPolicy) -> Decision:
    share = last.read_share
    cooldown = max(state.cooldown - 1, 0)
    cheap = _cheap_reads(last, policy)
    if cheap:
        return Decision(replace(state, agree=0, cooldown=cooldown), cheap, share)
    agree = state.agree + 1
    if agree >= policy.patience and cooldown == 0:
        probe = AutoState(PROBE, left=1 + policy.patience, failed=state.failed)
        return Decision(probe, f"probe: reads {share:.1%} of the batch for {agree} batches", share)
    wait = f"next probe in {cooldown} batches" if cooldown else f"{agree}/{policy.patience} batches"
    return Decision(replace(state, agree=agree, cooldown=cooldown), f"reads {share:.1%} of the batch: {wait}", share)


def _probe(state: AutoState, history: Sequence[Sample], policy: AutoPolicy) -> Decision:
    left = state.left - 1
    share = history[-1].read_share
    if left > 0:
        done, total = 1 + policy.patience - left, 1 + policy.patience
        return Decision(replace(state, left=left), f"probing: {done}/{total}", share)
    ratio = _ratio(_measured_on(history, policy.patience), _measured_off(history, policy.window))
    if ratio is not None and ratio <= 1 - policy.margin:
        return Decision(AutoState(ON), f"probe: prefetching pays (cost {ratio:.2f}x off)", share, ratio)
    return _give_up(state.failed + 1, f"probe: prefetching does not pay (cost {_x(ratio)} off)", share, ratio, policy)


def _on(state: AutoState, history: Sequence[Sample], policy: AutoPolicy) -> Decision:
    last, share = history[-1], history[-1].read_share
    since = state.since_recheck + 1
    if since >= policy.recheck_every:
        return Decision(replace(state, phase=RECHECK, agree=0), "recheck: one batch off to measure off again", share)
    if _first_on(history):  # a cold cache after a recheck: not measured
        return Decision(replace(state, since_recheck=since), "on: warming the cache", share)
    ratio = _ratio([last], _measured_off(history, policy.window))
    agree = state.agree + 1 if ratio is not None and ratio > 1 else 0
    if agree >= policy.patience:
        reason = f"prefetching costs more than off for {agree} batches (cost {_x(ratio)} off)"
        return _give_up(1, reason, share, ratio, policy)
    return Decision(AutoState(ON, agree=agree, since_recheck=since), f"on: cost {_x(ratio)} off", share, ratio)


def _recheck(state: AutoState, history: Sequence[Sample], policy: AutoPolicy) -> Decision:
    share = history[-1].read_share
    cheap = _cheap_reads(history[-1], policy)
    if cheap:
        return _give_up(1, f"recheck without prefetching: {cheap}", share, None, policy)
    ratio = _ratio(_measured_on(history, policy.patience), [history[-1]])
    if ratio is not None and ratio > 1:
        return _give_up(1, f"recheck: off is cheaper (prefetching costs {ratio:.2f}x off)", share, ratio, policy)
    return Decision(AutoState(ON), f"recheck: prefetching still pays (cost {_x(ratio)} off)", share, ratio)


def _give_up(failed: int, reason: str, share: float, ratio: float | None, policy: AutoPolicy) -> Decision:
    """Prefetching off, the next probe after a cooldown that doubles with each failed probe."""
    cooldown = min(policy.probe_every * 2 ** (failed - 1), policy.max_cooldown)
    off = AutoState(OFF, cooldown=cooldown, failed=failed)
    return Decision(off, f"{reason}; next probe in {cooldown}", share, ratio)


def _first_on(history: Sequence[Sample]) -> bool:
    measured = [s for s in history if s.rows > 0]
    return len(measured) < 2 or not measured[-2].on


def _measured_on(history: Sequence[Sample], count: int) -> list[Sample]:
    """The latest ``count`` batches with prefetching on, each run's first (its cache cold) left out."""
    measured = [s for s in history if s.rows > 0]
    warm = [s for previous, s in zip(measured, measured[1:]) if s.on and previous.on]
    return warm[-count:]


def _measured_off(history: Sequence[Sample], count: int) -> list[Sample]:
    return [s for s in history if s.rows > 0 and not s.on][-count:]


def _ratio(on: Sequence[Sample], off: Sequence[Sample]) -> float | None:
    """Median cost with prefetching over median cost without; None when either is unmeasured."""
    if not on or not off:
        return None
    without = statistics.median(s.cost for s in off)
    return statistics.median(s.cost for s in on) / without if without > 0 else None


def _x(ratio: float | None) -> str:
    return "unmeasured" if ratio is None else f"{ratio:.2f}x"


class AutoPrefetch:
    """Keeps auto's state and the latest batches; :meth:`observe` after each batch gives its record."""

    HISTORY = 64

    def __init__(self, policy: AutoPolicy = AutoPolicy()):
        self.policy = policy
        self.state = AutoState()
        self.history: deque[Sample] = deque(maxlen=self.HISTORY)

    @property
    def on(self) -> bool:
        """Whether the next batch prefetches."""
        return self.state.on

    def observe(self, sample: Sample) -> dict[str, object]:
        """Record a batch run as :attr:`on` said; decide the next; the batch's record of the choice."""
        ran = self.on
        self.history.append(sample)
        decision = decide(self.state, self.history, self.policy)
        self.state = decision.state
        return {
            "prefetching": "on" if ran else "off",
            "next": "on" if decision.on else "off",
            "phase": decision.state.phase,
            "reason": decision.reason,
            "read_share": _round(decision.read_share),
            "cost_us_per_row": _round(sample.cost * 1e6) if sample.rows > 0 else None,
            "ratio": _round(decision.ratio),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
