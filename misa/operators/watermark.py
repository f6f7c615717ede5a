"""Spark's event-time watermark, kept by every windowed operator and stored with each version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class EventTimeWatermark:
    """The watermark of batch v: the maximum event time (ms) of batches before v minus the delay; it starts at 0.

    An operator :meth:`observe`\\ s each batch's latest event time and calls :meth:`advance` at the
    end of the batch, which is when Spark's next (possibly no-data) batch would use the new value.
    """

    delay_ms: int
    at_us: int = 0
    max_event_us: int | None = None

    def observe(self, batch_max_us: int | None) -> None:
        """Take the batch's latest event time (None: the batch had none)."""
        if batch_max_us is not None:
            self.max_event_us = batch_max_us if self.max_event_us is None else max(self.max_event_us, batch_max_us)

    def advance(self) -> int | None:
        """Move to the latest event time seen minus the delay; the new watermark, or None if it did not move."""
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
