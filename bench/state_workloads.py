"""State-access streams in the spirit of Gadget: key distributions, event time and window logic.

A workload turns a stream of (key id, event time) records into what a stateful operator does to
its state per micro-batch: which state keys it reads (with the event time of their last access),
and which key range it deletes when windows close. Key ids follow a Zipf or a hot-spot
distribution over a fixed key space; event time advances by ``seconds_per_batch`` per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

WORKLOADS = ("aggregation", "tumbling", "sliding", "interval-join")
DISTRIBUTIONS = ("zipf", "hotspot")
_KEY = np.dtype(">u8")
_WINDOW_KEY = np.dtype([("end", ">u8"), ("id", ">u8")])
_SIDE_KEY = np.dtype([("side", "u1"), ("id", ">u8")])
WINDOWS = {"tumbling": (600, 600), "sliding": (300, 100)}
"""Default (window, slide) in seconds: long enough that, at 2,000 records per second, the open windows
hold at least ten times a 1 MiB cache on average (they empty as the watermark passes them)."""
START_S = 600  # event time at the start: the first windows are open and full


@dataclass(frozen=True)
class BatchAccesses:
    """One batch's state accesses: distinct keys with the event time (us) of their last access."""

    keys: list[bytes]
    ts: np.ndarray
    records: int
    close_before: bytes | None = None  # windows ending before this prefix close after the batch


def _split(raw: bytes, width: int) -> list[bytes]:
    return [raw[i : i + width] for i in range(0, len(raw), width)]


class KeyStream:
    """Key ids drawn from a Zipf (exponent ``skew``) or hot-spot distribution over ``key_space`` ids."""

    def __init__(
        self,
        distribution: str,
        key_space: int,
        rng: np.random.Generator,
        skew: float = 1.0,
        hot_fraction: float = 0.01,
        hot_probability: float = 0.8,
    ):
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"key distribution {distribution!r}: use one of {DISTRIBUTIONS}")
        self.distribution = distribution
        self.rng = rng
        self.ids = rng.permutation(key_space).astype(np.uint64)  # rank -> id, so hot ids are spread out
        ranks = np.arange(1, key_space + 1, dtype=np.float64)
        self.cdf = np.cumsum(ranks**-skew)
        self.cdf /= self.cdf[-1]
        self.hot = max(1, int(key_space * hot_fraction))
        self.hot_probability = hot_probability

    def draw(self, n: int) -> np.ndarray:
        if self.distribution == "zipf":
            ranks = np.searchsorted(self.cdf, self.rng.random(n))
        else:
            hot = self.rng.random(n) < self.hot_probability
            ranks = np.where(hot, self.rng.integers(0, self.hot, n), self.rng.integers(0, len(self.ids), n))
        return self.ids[np.minimum(ranks, len(self.ids) - 1)]


class StateWorkload:
    """Generates the preloaded state and the per-batch accesses of one workload."""

    def __init__(
        self,
        name: str,
        keys: KeyStream,
        key_space: int,
        batch_records: int,
        seconds_per_batch: float,
        rng: np.random.Generator,
        window_s: int | None = None,
        slide_s: int | None = None,
    ):
        if name not in WORKLOADS:
            raise ValueError(f"workload {name!r}: use one of {WORKLOADS}")
        default_window, default_slide = WINDOWS.get(name, (0, 0))
        self.window_s = window_s or default_window
        self.slide_s = self.window_s if name == "tumbling" else slide_s or default_slide
        if name in WINDOWS and (self.slide_s <= 0 or self.window_s % self.slide_s):
            raise ValueError(f"window {self.window_s} s must be a positive multiple of the slide {self.slide_s} s")
        self.name = name
        self.keys = keys
        self.key_space = key_space
        self.batch_records = batch_records
        self.batch_us = int(seconds_per_batch * 1_000_000)
        self.rng = rng
        self.start_us = START_S * 1_000_000

    @property
    def key_bytes(self) -> int:
        """Length of this workload's state keys."""
        return {"aggregation": _KEY, "interval-join": _SIDE_KEY}.get(self.name, _WINDOW_KEY).itemsize

    def preload(self, chunk: int = 100_000) -> Iterator[list[bytes]]:
        """The state as a long-running job would hold it at the start: every id in every open structure."""
        ids = np.arange(self.key_space, dtype=np.uint64)
        for begin in range(0, self.key_space, chunk):
            part = ids[begin : begin + chunk]
            yield self._encode(part, np.full(len(part), self.start_us, np.int64))

    def batches(self, count: int) -> Iterator[BatchAccesses]:
        for b in range(count):
            start = self.start_us + b * self.batch_us
            ids = self.keys.draw(self.batch_records)
            ts = np.sort(self.rng.integers(start, start + self.batch_us, self.batch_records))
            keys = self._encode(ids, ts)
            per_record = len(keys) // len(ids)
            stamps = np.repeat(ts, per_record)
            latest: dict[bytes, int] = dict(zip(keys, stamps.tolist()))  # ts ascending: the last wins
            closing = None
            if self.name in ("tumbling", "sliding"):  # the watermark reaches the batch's end: earlier windows close
                closing = int(start + self.batch_us + 1).to_bytes(8, "big")
            yield BatchAccesses(
                list(latest), np.fromiter(latest.values(), np.int64, len(latest)), self.batch_records, closing
            )

    def _encode(self, ids: np.ndarray, ts: np.ndarray) -> list[bytes]:
        """State keys of records (per record, in order; several per record for sliding windows and joins)."""
        if self.name == "aggregation":
            return _split(ids.astype(_KEY).tobytes(), _KEY.itemsize)
        if self.name == "interval-join":  # a record reads the other side's entry and updates its own
            rows = np.zeros((len(ids), 2), _SIDE_KEY)
            rows["side"][:, 1] = 1
            rows["id"] = ids[:, None]
            return _split(rows.tobytes(), _SIDE_KEY.itemsize)
        slide_us = self.slide_s * 1_000_000
        per_record = self.window_s // self.slide_s
        first_end = (ts // slide_us + 1) * slide_us
        ends = first_end[:, None] + slide_us * np.arange(per_record)[None, :]
        rows = np.zeros(ends.shape, _WINDOW_KEY)
        rows["end"] = ends
        rows["id"] = ids[:, None]
        return _split(rows.tobytes(), _WINDOW_KEY.itemsize)
