"""The per-key expiry timers of ``dropDuplicatesWithinWatermark`` that :class:`misa.operators.dedup.Deduplicate`'s
expiry records replaced (the operator up to 2026-11-28), kept as the tests' reference: a timer key per key
(``0xFE d`` ++ expiry ++ key), scanned and deleted one by one."""

from __future__ import annotations

import numpy as np

from misa.operators.dedup import SEEN, Deduplicate
from misa.state.keys import DEDUP_EXPIRY, joined, window_prefix
from misa.state.view import StateView


class PerKeyDeduplicate(Deduplicate):
    """:class:`Deduplicate` with a timer key per remembered key, as it had before."""

    def _remember(self, state: StateView, keys: list[bytes], times: np.ndarray) -> None:
        if not self.within_watermark:
            super()._remember(state, keys, times)
            return
        expiries = self._expiries(times)
        state.put_many(keys, [int(t).to_bytes(8, "big") for t in expiries])
        state.put_many(joined(DEDUP_EXPIRY, expiries, keys), [SEEN] * len(keys))

    def _evict(self, state: StateView, previous: int, watermark: int) -> None:
        if not self.within_watermark or watermark <= previous:
            super()._evict(state, previous, watermark)
            return
        begin, end = DEDUP_EXPIRY + window_prefix(0), DEDUP_EXPIRY + window_prefix(watermark + 1)
        timers = state.scan(begin, end)
        if timers:
            state.put_many([k[len(DEDUP_EXPIRY) + 8 :] for k, _ in timers], [None] * len(timers))
            state.delete_range(begin, end)
