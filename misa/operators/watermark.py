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
tells an operator which happened: after each data batch (:meth:`EventTimeWatermark.begin_batch`) it
calls the operator's ``no_data_batch`` when Spark would run one (:meth:`EventTimeWatermark.advance`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class EventTimeWatermark:
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
        candidate = self.after(self.max_event_us)
        if candidate is not None:
            self.at_us = candidate
        return candidate

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
