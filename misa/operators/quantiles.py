"""Spark's quantile sketch, as ``percentile_approx`` keeps it: ``QuantileSummaries`` (Greenwald-Khanna, with a head
buffer) behind ``ApproximatePercentile.PercentileDigest``, ported step by step (Spark 4's
sql/catalyst/.../util/QuantileSummaries.scala and .../aggregate/ApproximatePercentile.scala).

Spark keeps per group a digest of relative error ``1 / accuracy``: each row's value (as a double) is inserted into
its head buffer (sorted into the samples every :data:`HEAD_SIZE` values, then compressed past
:data:`COMPRESS_THRESHOLD` samples); a partial buffer is serialized compressed; buffers are merged compressed (the
left one's samples first on equal values, each side's samples that interleave the other's widened by the other's
error); a percentile is read off the compressed samples by rank. :class:`Summary` does the same, with the same
arithmetic (Java doubles are Python floats, Spark's longs Python ints).

While a summary's count is below ``accuracy / 2`` every sample is kept with ``g = 1, delta = 0``: its percentile is
the value at rank ``ceil(p * count)`` of the sorted values, whatever the split and order of the merges. Beyond, the
samples' deltas (and past ``accuracy`` values, their compression) depend on how the rows were split into partial
buffers and on the order of the merges: the result still has the sketch's guaranteed error, not one exact value.
NaN breaks the count bound: a merge compares samples with ``<`` (false against NaN) and compression keeps the first
sample only when it is at most the last, so a merge of summaries holding NaN drops samples, in Spark's sketch as here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

COMPRESS_THRESHOLD = 10_000  # QuantileSummaries.defaultCompressThreshold
HEAD_SIZE = 50_000  # QuantileSummaries.defaultHeadSize
Stats = tuple[float, int, int]  # (value, g, delta) of the Greenwald-Khanna paper


@dataclass
class Summary:
    """A ``QuantileSummaries``: ``sampled`` (sorted), ``count`` of the values in it, the head buffer ``head`` of
    values not yet inserted, and whether it is ``compressed`` (what Spark merges, stores and queries)."""

    relative_error: float
    sampled: list[Stats] = field(default_factory=list)
    count: int = 0
    compressed: bool = False
    head: list[float] = field(default_factory=list)
    compress_threshold: int = COMPRESS_THRESHOLD

    @classmethod
    def of_accuracy(cls, accuracy: int) -> Summary:
        """An empty digest, as ``createAggregationBuffer`` makes it (relative error ``1.0 / accuracy``)."""
        return cls(1.0 / accuracy, compressed=True)

    def insert(self, x: float) -> Summary:
        """``insert``: into the head buffer; every :data:`HEAD_SIZE` values the buffer is sorted into the samples,
        which are compressed past the compress threshold (a new summary then; else this one, changed)."""
        self.head.append(x)
        self.compressed = False
        if len(self.head) < HEAD_SIZE:
            return self
        result = self._with_head_inserted()
        return result.compress() if len(result.sampled) >= self.compress_threshold else result

    def _with_head_inserted(self) -> Summary:
        """``withHeadBufferInserted``: the head's values, sorted, merged into the samples; an inserted value's delta
        is ``floor(2 * relative_error * count so far)``, but 0 for the new minimum and for the new maximum."""
        if not self.head:
            return self
        current = self.count
        ordered = sorted(self.head, key=_total_order)
        samples: list[Stats] = []
        index = 0
        for position, value in enumerate(ordered):
            while index < len(self.sampled) and self.sampled[index][0] <= value:
                samples.append(self.sampled[index])
                index += 1
            current += 1
            last = index == len(self.sampled) and position == len(ordered) - 1
            delta = 0 if not samples or last else math.floor(2 * self.relative_error * current)
            samples.append((value, 1, delta))
        samples += self.sampled[index:]
        return Summary(self.relative_error, samples, current, compress_threshold=self.compress_threshold)

    def compact(self) -> Summary:
        """This summary compressed, as ``PercentileDigest`` reads it (``quantileSummaries``): compressed only if it
        is not already."""
        return self if self.compressed else self.compress()

    def compress(self) -> Summary:
        """``compress``: the head inserted, then neighbouring samples merged below ``2 * relative_error * count``."""
        inserted = self._with_head_inserted()
        threshold = 2 * self.relative_error * inserted.count
        return Summary(self.relative_error, _compressed(inserted.sampled, threshold), inserted.count, True)

    def merge(self, other: Summary) -> Summary:
        """``merge`` of two compressed summaries (``self`` the buffer, ``other`` merged into it)."""
        if self.head or other.head:
            raise ValueError("a summary must be compressed before it is merged")
        if other.count == 0:
            return _copy(self)
        if self.count == 0:
            return _copy(other)
        merged: list[Stats] = []
        relative_error = max(self.relative_error, other.relative_error)
        count = self.count + other.count
        self_widening = math.floor(2 * other.relative_error * other.count)
        other_widening = math.floor(2 * self.relative_error * self.count)
        i = j = 0
        while i < len(self.sampled) and j < len(other.sampled):
            mine, theirs = self.sampled[i], other.sampled[j]
            if mine[0] < theirs[0]:
                i += 1
                sample, widening = mine, self_widening if j > 0 else 0
            else:
                j += 1
                sample, widening = theirs, other_widening if i > 0 else 0
            merged.append((sample[0], sample[1], sample[2] + widening))
        merged += self.sampled[i:] + other.sampled[j:]
        samples = _compressed(merged, 2 * relative_error * count)
        return Summary(relative_error, samples, count, True, compress_threshold=other.compress_threshold)

    def query(self, percentiles: Sequence[float]) -> list[float] | None:
        """``query``: each percentile's sample, in the order given (None: no samples)."""
        if self.head:
            raise ValueError("a summary must be compressed before it is queried")
        if not self.sampled:
            return None
        target_error = float(max(g + delta for _, g, delta in self.sampled) // 2)
        index, min_rank = 0, self.sampled[0][1]
        result = [0.0] * len(percentiles)
        for percentile, position in sorted(zip(percentiles, range(len(percentiles))), key=lambda pair: pair[0]):
            if percentile <= self.relative_error:
                result[position] = self.sampled[0][0]
            elif percentile >= 1 - self.relative_error:
                result[position] = self.sampled[-1][0]
            else:
                index, min_rank, result[position] = self._find(index, min_rank, target_error, percentile)
        return result

    def _find(self, index: int, min_rank: int, target_error: float, percentile: float) -> tuple[int, int, float]:
        """``findApproxQuantile``: from sample ``index`` (of minimum rank ``min_rank``) on, the first sample whose
        rank range holds the percentile's rank within the target error; (next index, its rank, the value)."""
        rank = math.ceil(percentile * self.count)
        value, _, delta = self.sampled[index]
        while index < len(self.sampled) - 1:
            if min_rank + delta - target_error <= rank <= min_rank + target_error:
                return index, min_rank, value
            index += 1
            value, g, delta = self.sampled[index]
            min_rank += g
        return len(self.sampled) - 1, 0, self.sampled[-1][0]


def digest_of(values: Sequence[float], accuracy: int) -> Summary:
    """A partial buffer of ``values`` (one task's rows of a group, in order), as Spark serializes it: compressed."""
    summary = Summary.of_accuracy(accuracy)
    for value in values:
        summary = summary.insert(value)
    return summary.compact()


def merge_digests(buffer: Summary, other: Summary) -> Summary:
    """``PercentileDigest.merge``: ``other`` merged into ``buffer`` (Spark's stored state is the buffer, a batch's
    partial the other)."""
    return buffer.compact().merge(other.compact())


def percentiles_of(summary: Summary, percentages: Sequence[float]) -> list[float] | None:
    """``getPercentiles``: the percentiles of a digest, None when it holds no value (Spark's null)."""
    summary = summary.compact()
    if summary.count == 0 or not percentages:
        return None
    return summary.query(percentages)


def _copy(summary: Summary) -> Summary:
    """``shallowCopy``."""
    return Summary(
        summary.relative_error, list(summary.sampled), summary.count, summary.compressed, [], summary.compress_threshold
    )


def _compressed(samples: Sequence[Stats], threshold: float) -> list[Stats]:
    """``compressImmut``: from the last sample down, a sample is folded into the one after it (their g added) while
    ``g + head g + head delta`` stays below ``threshold``; the last sample is kept, the first too."""
    if not samples:
        return []
    kept: list[Stats] = []
    head = samples[-1]
    for i in range(len(samples) - 2, 0, -1):
        sample = samples[i]
        if sample[1] + head[1] + head[2] < threshold:
            head = (head[0], head[1] + sample[1], head[2])
        else:
            kept.append(head)
            head = sample
    kept.append(head)
    if samples[0][0] <= head[0] and len(samples) > 1:
        kept.append(samples[0])
    return kept[::-1]


def _total_order(value: float) -> tuple[bool, float, float]:
    """Java's ``Double.compare`` order, Scala's for sorting doubles: -0.0 before 0.0, NaN after every number."""
    if math.isnan(value):
        return True, 0.0, 0.0
    return False, value, math.copysign(1.0, value)
