"""Spark's event-time watermarks of a stateful operator, kept by every windowed operator and stored with each version.

Since Spark 3.4 (``spark.sql.streaming.statefulOperator.allowMultiple``, the default) a stateful operator
in batch N uses two watermarks:

* the **late-events watermark**: the one batch N - 1 evicted with; input rows at or before it are late
  (dropped and counted);
* the **eviction watermark**: the latest event time of the batches before N minus the delay (it starts
  at 0 and never goes back); state at or before it is evicted (append mode emits it first).

Spark runs a batch without data between two data batches only when the trigger finds no new input
(the watermark moved and an operator could evict with it); a backlog or a busy source runs data
batches back to back, so a row that is late by the newest watermark may still count. The runtime
tells an operator which happened: it runs the operator's ``no_data_batch`` as its own batch when Spark's trigger
would run one (:mod:`misa.runtime.no_data_batches`), and ``apply`` for a data batch
(:meth:`EventTimeWatermark.begin_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FollowsSpark:
    """A watermark the runtime may set from Spark's own for the coming batch (:meth:`follow`)."""

    spark_next_us: int | None = field(default=None, kw_only=True, repr=False)

    def follow(self, spark_us: int) -> None:
        """Take Spark's watermark for the coming batch (the one its offsets log holds for it) instead of this
        model's: Spark's counts every row its ``withWatermark`` node saw, also those a join with a static table or
        a filter below the operator then drops, which the operator never sees. Used by the next advance only."""
        self.spark_next_us = spark_us

    def _followed(self, modelled: int) -> int:
        """The next watermark: Spark's when followed (once), else ``modelled``."""
        chosen, self.spark_next_us = (modelled if self.spark_next_us is None else self.spark_next_us), None
        return chosen


@dataclass
class EventTimeWatermark(FollowsSpark):
    """``at_us``: the watermark the last batch (with or without data) evicted with, so the next data batch's
    late-events watermark; ``max_event_us``: the latest event time of the batches run so far."""

    delay_ms: int
    at_us: int = 0
    max_event_us: int | None = None

    def begin_batch(self) -> tuple[int, int]:
        """A data batch starts, before its rows are :meth:`observe`\\ d: its late-events watermark and its
        eviction watermark (which becomes :attr:`at_us`)."""
        late = self.at_us
        self.advance()
        return late, self.at_us

    def observe(self, batch_max_us: int | None) -> None:
        """Take the batch's latest event time (None: the batch had none)."""
        if batch_max_us is not None:
            self.max_event_us = batch_max_us if self.max_event_us is None else max(self.max_event_us, batch_max_us)

    def advance(self) -> int | None:
        """Move to the latest event time seen minus the delay (a batch without data, or the eviction watermark of
        the next data batch); the new watermark, or None if it did not move."""
        candidate = self._followed(self.after(self.max_event_us) or self.at_us)
        if candidate <= self.at_us:
            return None
        self.at_us = candidate
        return candidate

    def moves(self) -> bool:
        """Whether the next batch's eviction watermark is ahead of :attr:`at_us` (Spark would run a batch without
        data for it when no input arrives)."""
        return self.after(None) is not None

    def after(self, event_us: int | None) -> int | None:
        """The watermark once events up to ``event_us`` (and those seen) are observed, or None if it would not move."""
        seen = [t for t in (self.max_event_us, event_us) if t is not None]
        if not seen:
            return None
        latest = max(seen)
        candidate = (latest // 1000 - self.delay_ms) * 1000
        return candidate if candidate > self.at_us else None

    def metadata(self) -> dict[str, Any]:
        return {"watermark_us": self.at_us, "max_event_us": self.max_event_us}

    def restore(self, metadata: dict[str, Any]) -> None:
        self.at_us = int(metadata.get("watermark_us", 0))
        self.max_event_us = metadata.get("max_event_us")

    def merge(self, maxima: list[int | None]) -> None:
        """Take the latest event times key partitions observed (worker processes): the whole batch's."""
        self.observe(max((m for m in maxima if m is not None), default=None))


@dataclass
class InputsWatermark(FollowsSpark):
    """Spark's global watermark of a query with several ``withWatermark`` inputs (a stream-stream join's sides, a
    union's streams).

    Each input's watermark is its latest event time (ms) minus its delay, kept in memory only, as Spark's
    ``WatermarkTracker`` keeps it, and 0 while the input has had no rows; the global one is their minimum
    (``spark.sql.streaming.multipleWatermarkPolicy=min``, the default: it waits for every input) or maximum, and
    never goes back. A restart starts each input's again from no rows, from the global watermark the last batch
    left for the next one (Spark's commit log keeps it). ``at_us`` and the two watermarks of a batch are as in
    :class:`EventTimeWatermark`."""

    delays_ms: tuple[int | None, ...]  # per input; None: an input without withWatermark, which never counts
    policy: str = "min"
    nodes: tuple[int, ...] = ()  # per input, its withWatermark node (default: one each); see :meth:`_next`
    at_us: int = 0
    max_event_us: dict[int, int] = field(default_factory=dict)  # per input, since the query (re)started
    restored_next_us: int = 0  # the next batch's watermark when the query (re)started

    def begin_batch(self) -> tuple[int, int]:
        """A data batch starts: its late-events and eviction watermarks."""
        late = self.at_us
        self.advance()
        return late, self.at_us

    def observe_input(self, index: int, batch_max_us: int) -> None:
        """Input ``index`` had rows this batch, the latest at ``batch_max_us``."""
        self.max_event_us[index] = max(batch_max_us, self.max_event_us.get(index, batch_max_us))

    def merge(self, maxima: list[dict[int, int] | None]) -> None:
        """Take what key partitions observed (worker processes): every input's latest event time of the batch."""
        for part in maxima:
            for index, latest in (part or {}).items():
                self.observe_input(int(index), latest)

    def advance(self) -> int | None:
        """Move to the policy's choice of the inputs' watermarks; the new watermark, or None if it did not move."""
        candidate = self._followed(self._next())
        if candidate <= self.at_us:
            return None
        self.at_us = candidate
        return candidate

    def moves(self) -> bool:
        """Whether the next batch's eviction watermark is ahead of :attr:`at_us`."""
        return self._next() > self.at_us

    def after(self, event_us: int | None) -> int | None:
        """The watermark once every input saw events up to ``event_us`` too, or None if it would not move (an estimate
        for prefetch hints, whose rows are not told apart by input)."""
        latest = dict(self.max_event_us)
        if event_us is not None:
            latest = {i: max(event_us, latest.get(i, event_us)) for i in range(len(self.delays_ms))}
        candidate = self._next(latest)
        return candidate if candidate > self.at_us else None

    def _next(self, max_event_us: dict[int, int] | None = None) -> int:
        """The policy's choice of the nodes' watermarks. Spark's tracker keeps one per ``withWatermark`` node (by its
        id): inputs that read one node (one stream split by filters into a self-join's sides or a union's
        branches) share the latest of their watermarks; a node none of whose inputs had rows counts as 0."""
        latest = self.max_event_us if max_event_us is None else max_event_us
        marks: dict[int, int] = {}
        for i, delay in enumerate(self.delays_ms):
            if delay is not None:
                node = self.nodes[i] if self.nodes else i
                mark = (latest[i] // 1000 - delay) * 1000 if i in latest else 0
                marks[node] = max(mark, marks.get(node, mark))
        chosen = (min(marks.values()) if self.policy == "min" else max(marks.values())) if marks else 0
        return max(chosen, self.restored_next_us)

    def metadata(self) -> dict[str, Any]:
        return {"watermark_us": self.at_us, "next_watermark_us": max(self._next(), self.at_us)}

    def restore(self, metadata: dict[str, Any]) -> None:
        self.at_us = int(metadata.get("watermark_us", 0))
        self.restored_next_us = int(metadata.get("next_watermark_us", self.at_us))
        self.max_event_us = {}


@dataclass(frozen=True)
class WatermarkInputs:
    """A stream that is a union of inputs with a ``withWatermark`` each: Spark keeps one global watermark over them
    (:class:`InputsWatermark`). ``column`` holds each row's input (0, 1, ...); ``delays_ms`` each input's delay,
    None for an input without ``withWatermark`` (its rows do not move the watermark)."""

    column: str
    delays_ms: tuple[int | None, ...]
    policy: str = "min"  # spark.sql.streaming.multipleWatermarkPolicy
    nodes: tuple[int, ...] = ()  # each input's withWatermark node (:class:`InputsWatermark`)

    @property
    def watermarked(self) -> list[int]:
        """The inputs with a withWatermark."""
        return [i for i, delay in enumerate(self.delays_ms) if delay is not None]

    def watermark(self) -> InputsWatermark:
        return InputsWatermark(self.delays_ms, self.policy, self.nodes)

    def observe(self, watermark: InputsWatermark, maxima: dict[int, int | None]) -> None:
        """Take the batch's latest event time (us) of each watermarked input that had rows with one (None: none)."""
        for index, latest in maxima.items():
            if latest is not None:
                watermark.observe_input(index, int(latest))


def inputs_signature(inputs: WatermarkInputs | None) -> dict[str, Any]:
    """An operator's signature entry for a union's watermarked inputs (none for one stream): their delays."""
    if inputs is None:
        return {}
    return {"watermark_inputs": [f"{delay}ms" if delay is not None else "none" for delay in inputs.delays_ms]}


@dataclass
class Propagated:
    """What a chain's watermarks above the lowest operator share: :attr:`next_us`, the upstream's output watermark
    for the running batch (set by the chain), and :attr:`at_us`, the one the last batch evicted with, the only one
    stored (a restart starts from it)."""

    at_us: int = 0
    next_us: int = field(default=0, kw_only=True)

    def after(self, event_us: int | None) -> int | None:
        return None

    def metadata(self) -> dict[str, Any]:
        return {"watermark_us": self.at_us}

    def restore(self, metadata: dict[str, Any]) -> None:
        self.at_us = self.next_us = int(metadata.get("watermark_us", 0))


@dataclass
class PropagatedWatermark(Propagated, EventTimeWatermark):
    """The watermark of a stateful operator that reads another's output in the same query (a chain): Spark's
    ``PropagateWatermarkSimulator`` gives it the upstream's output watermark as its input watermark, so it observes
    no event times of its own. The chain sets :attr:`next_us` (the upstream's output watermark for the running batch)
    before each batch; :attr:`at_us` is, as for :class:`EventTimeWatermark`, the one the last batch evicted with (the
    next batch's late-events watermark, Spark's input watermark of the batch before)."""

    def observe(self, batch_max_us: int | None) -> None:
        """Its rows move nothing: the upstream's watermark does."""

    def advance(self) -> int | None:
        candidate = self._followed(self.next_us)
        if candidate <= self.at_us:
            return None
        self.at_us = candidate
        return candidate

    def moves(self) -> bool:
        return self.next_us > self.at_us


@dataclass
class PropagatedInputsWatermark(Propagated, InputsWatermark):
    """The watermark of a stream-stream join above another stateful operation (a chain): Spark's
    ``PropagateWatermarkSimulator`` gives the join the least of its inputs' output watermarks, the operation below's
    (the side reading a stream gives the global watermark, never below it), so its sides' rows move nothing. The
    chain sets :attr:`next_us` before each batch, as for :class:`PropagatedWatermark`."""

    def observe_input(self, index: int, batch_max_us: int) -> None:
        """Its rows move nothing: the upstream's watermark does."""

    def _next(self, max_event_us: dict[int, int] | None = None) -> int:
        return self.next_us
