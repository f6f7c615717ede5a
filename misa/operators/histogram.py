"""``histogram_numeric(col, nb)`` as Spark computes it: its ``NumericHistogram`` (Ben-Haim and Tom-Tov's streaming
histogram, Hive's code), ported.

A histogram is a list of ``[x, y]`` bins sorted by ``x`` (a bin's centre and height), at most ``nb`` of them. Adding
a value raises the height of the bin at exactly that value, or inserts a bin of height 1 and, past ``nb`` bins, merges
the two closest (their height-weighted centre), ties between equally close pairs broken by a ``java.util.Random``
seeded 31183, as each of Spark's buffers breaks them. Spark builds one buffer per group and input partition from its
rows in reading order, and merges a stored buffer with a batch's by concatenating their bins, sorting them stably
and trimming with a fresh buffer's random numbers; misa builds a batch's buffer from the group's rows of the batch
(:func:`histogram_of`) and merges it into the stored one alike (:func:`histogram_merge`), so its result is Spark's
where Spark reads a batch's rows of a group in one partition.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import pyarrow as pa

SEED = 31183  # Spark's NumericHistogram's fixed seed
Bins = list[list[float]]


class JavaRandom:
    """``java.util.Random``'s generator: its 48-bit linear congruence and ``nextDouble``."""

    MULTIPLIER, ADDEND, MASK = 0x5DEECE66D, 0xB, (1 << 48) - 1

    def __init__(self, seed: int):
        self.seed = (seed ^ self.MULTIPLIER) & self.MASK

    def _next(self, bits: int) -> int:
        self.seed = (self.seed * self.MULTIPLIER + self.ADDEND) & self.MASK
        return self.seed >> (48 - bits)

    def next_double(self) -> float:
        return ((self._next(26) << 27) + self._next(27)) * (1.0 / (1 << 53))


def histogram_of(values: Sequence[float], bins: int) -> Bins:
    """One buffer of ``bins`` bins built from ``values`` in order (Spark's ``update``: nulls are skipped)."""
    histogram: Bins = []
    random = JavaRandom(SEED)
    for value in values:
        if value is not None:
            _add(histogram, bins, random, float(value))
    return histogram


def histogram_merge(stored: Bins, later: Bins, bins: int) -> Bins:
    """``later`` merged into ``stored`` as Spark's buffer merges another: an empty one takes the other's bins; else
    both sets of bins sorted by centre (stably, Java's ``Double.compare``) and trimmed to ``bins``."""
    if not stored:
        return [list(b) for b in later]
    merged = sorted([list(b) for b in stored + later], key=lambda b: _java_order(b[0]))
    _trim(merged, bins, JavaRandom(SEED))
    return merged


def histogram_result(histogram: Bins, x_type: pa.DataType) -> list[dict[str, Any]] | None:
    """Spark's result: each bin's centre as the input's type (Scala's conversion of a double) and its height; null
    without a bin."""
    if not histogram:
        return None
    return [{"x": _as_type(x, x_type), "y": y} for x, y in histogram]


def _add(histogram: Bins, bins: int, random: JavaRandom, value: float) -> None:
    at, low, high = 0, 0, len(histogram)
    while low < high:  # Spark's binary search: ``at`` is the bin to shift right for the value
        at = (low + high) // 2
        if histogram[at][0] > value:
            high = at
        elif histogram[at][0] < value:
            at += 1
            low = at
        else:
            break
    if at < len(histogram) and histogram[at][0] == value:
        histogram[at][1] += 1
        return
    histogram.insert(at, [value, 1.0])
    if len(histogram) > bins:
        _trim(histogram, bins, random)


def _trim(histogram: Bins, bins: int, random: JavaRandom) -> None:
    """Merge the closest pairs of bins until ``bins`` are left, ties broken as Spark's loop draws them."""
    while len(histogram) > bins:
        smallest, at, ties = histogram[1][0] - histogram[0][0], 0, 1
        for i in range(1, len(histogram) - 1):
            difference = histogram[i + 1][0] - histogram[i][0]
            if difference < smallest:
                smallest, at, ties = difference, i, 1
            elif difference == smallest:
                draw = random.next_double()
                ties += 1
                if draw <= 1.0 / ties:
                    at = i
        (x, y), (next_x, next_y) = histogram[at], histogram[at + 1]
        height = y + next_y
        centre = x * (y / height)
        centre += next_x / height * next_y
        histogram[at] = [centre, height]
        del histogram[at + 1]


def _java_order(x: float) -> tuple[int, float, float]:
    """Java's ``Double.compare`` as a sort key: -0.0 before 0.0, NaN last."""
    return (1, 0.0, 0.0) if math.isnan(x) else (0, x, math.copysign(1.0, x))


def _as_type(x: float, x_type: pa.DataType) -> Any:
    """A bin's centre in the input's type, as Scala converts a double (``toInt``, ``toLong``: toward zero, NaN 0,
    saturating; ``toByte``, ``toShort``: through ``toInt``, wrapping)."""
    if pa.types.is_floating(x_type):
        return x
    if pa.types.is_int8(x_type) or pa.types.is_int16(x_type):
        bits = x_type.bit_width
        wrapped = _to_integer(x, 32) & ((1 << bits) - 1)
        return wrapped - (1 << bits) if wrapped >= 1 << (bits - 1) else wrapped
    if pa.types.is_int32(x_type) or pa.types.is_date32(x_type):
        return _to_integer(x, 32)
    return _to_integer(x, 64)  # bigint, timestamps (microseconds)


def _to_integer(x: float, bits: int) -> int:
    if math.isnan(x):
        return 0
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if math.isinf(x):
        return high if x > 0 else low
    return max(low, min(high, int(x)))
