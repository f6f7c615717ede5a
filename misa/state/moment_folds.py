"""Moments of aggregate states merged as Spark merges its moment buffers (Chan et al.), in float64 cells.

A moments state is the mean (or the x mean), the count of inputs, then the fold's further cells:

* :data:`MOMENTS` (stddev, variance): ``m2``, the sum of squared deviations from the mean;
* :data:`MOMENTS4` (skewness, kurtosis): ``m2``, ``m3``, ``m4`` (Spark's ``CentralMomentAgg`` of order 4);
* :data:`COMOMENTS` (covariance, correlation): the y mean, ``ck`` (the co-moment), ``xMk``, ``yMk`` (Spark's
  ``PearsonCorrelation``; covariance reads the first two).

Merged with a state of no inputs, a state stays as it is (so equal values keep their moments exactly 0).
"""

from __future__ import annotations

import numpy as np

MOMENTS = "moments"
MOMENTS4 = "moments4"
COMOMENTS = "comoments"
EXTRA_CELLS = {MOMENTS: 1, MOMENTS4: 3, COMOMENTS: 4}  # cells after the mean and the count


def fold_moments(op: str, cells: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The moments of each segment of ``cells`` (int64 rows: mean bits, count, further float64 bits) beginning at
    ``starts``, merged one row after the other in order."""
    floats = cells.view(np.float64)
    count = cells[:, 1]
    out = floats[starts].copy()
    out_count = count[starts].copy()
    lengths = np.diff(np.r_[starts, len(cells)])
    for step in range(1, int(lengths.max(initial=1))):
        at = np.flatnonzero(lengths > step)
        rows = starts[at] + step
        n1, n2 = out_count[at].astype(np.float64), count[rows].astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # NaN and infinities give NaN, as Spark's
            merged = _merge(op, out[at], floats[rows], n1, n2)
        out[at] = np.where((n1 == 0)[:, None], floats[rows], np.where((n2 == 0)[:, None], out[at], merged))
        out_count[at] += count[rows]
    result = out.view(np.int64)
    result[:, 1] = out_count
    return result


def _merge(op: str, a: np.ndarray, b: np.ndarray, n1: np.ndarray, n2: np.ndarray) -> np.ndarray:
    """Spark's merge expressions of two moment buffers ``a`` and ``b`` (rows of cells) of ``n1`` and ``n2`` inputs."""
    n = n1 + n2
    delta = b[:, 0] - a[:, 0]
    delta_n = delta / np.where(n == 0, 1.0, n)
    out = np.empty_like(a)
    out[:, 0] = a[:, 0] + delta_n * n2
    if op == COMOMENTS:
        dy = b[:, 2] - a[:, 2]
        dy_n = dy / np.where(n == 0, 1.0, n)
        out[:, 2] = a[:, 2] + dy_n * n2
        out[:, 3] = a[:, 3] + b[:, 3] + delta * dy_n * n1 * n2
        out[:, 4] = a[:, 4] + b[:, 4] + delta * delta_n * n1 * n2
        out[:, 5] = a[:, 5] + b[:, 5] + dy * dy_n * n1 * n2
        return out
    m2a, m2b = a[:, 2], b[:, 2]
    out[:, 2] = m2a + m2b + delta * delta_n * n1 * n2
    if op == MOMENTS4:
        m3a, m3b = a[:, 3], b[:, 3]
        out[:, 3] = m3a + m3b + delta_n * delta_n * delta * n1 * n2 * (n1 - n2) + 3.0 * delta_n * (n1 * m2b - n2 * m2a)
        out[:, 4] = (
            a[:, 4]
            + b[:, 4]
            + delta_n * delta_n * delta_n * delta * n1 * n2 * (n1 * n1 - n1 * n2 + n2 * n2)
            + 6.0 * delta_n * delta_n * (n1 * n1 * m2b + n2 * n2 * m2a)
            + 4.0 * delta_n * (n1 * m3b - n2 * m3a)
        )
    return out
