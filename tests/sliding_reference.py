"""A reference for the operators' sliding windows (20 s every 5 s, one key column, a watermark ``delay_s`` behind the
newest event): each window's rows kept in the order Spark aggregates them, its output row folded from them, as
update or append output would emit them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

S = 1_000_000
SIZE, SLIDE = 20 * S, 5 * S  # four panes a window
Row = tuple[Any, ...]  # (event time in us, key, ...)


class PerWindowReference:
    """Every window's rows (a batch's in ``order``, then the next batch's), its value ``fold(rows)``."""

    def __init__(
        self,
        delay_s: int,
        append: bool,
        fold: Callable[[list[Row]], tuple],
        order: Callable[[Row], Any] | None = None,
    ):
        self.delay_us, self.append, self.fold, self.order = delay_s * S, append, fold, order
        self.rows: dict[tuple[int, int], list[Row]] = defaultdict(list)
        self.watermark, self.max_event = 0, None

    def batch(self, rows: list[Row]) -> list[tuple]:
        """The rows the batch of ``rows`` emits: (window end, key, *value), sorted by their text."""
        changed, out = set(), []
        for row in sorted(rows, key=self.order) if self.order else rows:
            t, g = row[0], row[1]
            self.max_event = t if self.max_event is None else max(self.max_event, t)
            start = t // SLIDE * SLIDE
            while start > t - SIZE:
                if start + SIZE > self.watermark:
                    self.rows[(start + SIZE, g)].append(row)
                    changed.add((start + SIZE, g))
                start -= SLIDE
        if not self.append:
            out = [self.row(*window) for window in changed]
        if self.max_event is not None and self.max_event - self.delay_us > self.watermark:
            self.watermark = self.max_event - self.delay_us
            for window in sorted(w for w in self.rows if w[0] <= self.watermark):
                if self.append:
                    out.append(self.row(*window))
                del self.rows[window]
        return sorted(out, key=repr)

    def row(self, end: int, g: int) -> tuple:
        return (end, g, *self.fold(self.rows[(end, g)]))
