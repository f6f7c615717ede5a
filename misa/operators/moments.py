"""Spark's moment functions, kept as moments: stddev and variance, skewness and kurtosis, covariance and correlation,
and the linear regression's sums, slope, intercept and R² (``regr_*``, of a dependent y and an independent x: the
aggregate's column is x, its other column y).

A group's moments (:mod:`misa.state.moment_folds`) are computed as Spark's ``CentralMomentAgg`` and
``PearsonCorrelation`` compute them: over doubles (Spark casts the inputs), each batch's partial moments from Spark,
merged with the group's state as Spark merges two buffers (also combining the panes of a sliding window); covariance
and correlation over the rows where both columns are non-null. The results are Spark's: null without inputs; null
where Spark divides by zero (``spark.sql.legacy.statisticalAggregate=false``, Spark's default): the sample
functions and correlation of one input, skewness and kurtosis of equal values, correlation of a constant column.
"""

from __future__ import annotations

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

from misa.state.moment_folds import COMOMENTS, MOMENTS, MOMENTS4

VARIANCE_FUNCTIONS = ("stddev_samp", "stddev_pop", "var_samp", "var_pop")
SHAPE_FUNCTIONS = ("skewness", "kurtosis")
REGRESSION_FUNCTIONS = ("regr_sxx", "regr_syy", "regr_sxy", "regr_slope", "regr_intercept", "regr_r2")
CO_MOMENT_FUNCTIONS = ("covar_pop", "covar_samp", "corr", *REGRESSION_FUNCTIONS)  # of two columns
MOMENT_FUNCTIONS = (*VARIANCE_FUNCTIONS, *SHAPE_FUNCTIONS, *CO_MOMENT_FUNCTIONS)


def moment_fold(function: str) -> str:
    """The moments ``function`` keeps."""
    return COMOMENTS if function in CO_MOMENT_FUNCTIONS else MOMENTS4 if function in SHAPE_FUNCTIONS else MOMENTS


def moment_partials(function: str, x: Column, y: Column | None = None) -> list[Column]:
    """A group of rows' moments (as doubles): the mean, then the fold's further cells (the count is the caller's:
    :func:`moment_count`)."""
    if function in CO_MOMENT_FUNCTIONS:
        assert y is not None
        xs, ys = F.when(y.isNotNull(), x.cast("double")), F.when(x.isNotNull(), y.cast("double"))
        n = F.count(xs)
        return [F.avg(xs), F.avg(ys), F.covar_pop(xs, ys) * n, F.var_pop(xs) * n, F.var_pop(ys) * n]
    xs = x.cast("double")
    n, m2 = F.count(xs), F.var_pop(xs) * F.count(xs)
    if function not in SHAPE_FUNCTIONS:
        return [F.avg(xs), m2]
    # Spark gives no m3 and m4 of a group: they are read back from its skewness and kurtosis (0 for equal values)
    m3 = F.coalesce(F.skewness(xs) * F.sqrt(m2 * m2 * m2) / F.sqrt(n), F.lit(0.0))
    m4 = F.coalesce((F.kurtosis(xs) + 3.0) * m2 * m2 / n, F.lit(0.0))
    return [F.avg(xs), m2, m3, m4]


def moment_count(function: str, x: Column, y: Column | None = None) -> Column:
    """The group's count of inputs: of rows where both columns are non-null for two columns."""
    if function in CO_MOMENT_FUNCTIONS:
        assert y is not None
        return F.count(F.when(y.isNotNull(), x))
    return F.count(x)


def moment_results(
    function: str, count: np.ndarray, mean: np.ndarray, cells: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``function``'s values of groups of ``count`` inputs with moments ``mean`` and ``cells`` (those after the mean
    and the count), and where they are null, as Spark's evaluate expressions give them."""
    n = count.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if function in REGRESSION_FUNCTIONS:
            return _regression(function, n, mean, cells)
        if function in CO_MOMENT_FUNCTIONS:
            ck, xmk, ymk = cells[:, 1], cells[:, 2], cells[:, 3]
            if function == "covar_pop":
                return ck / np.where(n == 0, 1.0, n), n == 0
            if function == "covar_samp":
                return ck / np.where(n <= 1, 1.0, n - 1), n <= 1
            denominator = np.sqrt(xmk * ymk)
            null = (n <= 1) | (denominator == 0)  # Spark's division by zero is null
            return ck / np.where(null, 1.0, denominator), null
        m2 = cells[:, 0]
        if function in SHAPE_FUNCTIONS:
            null = (n == 0) | (m2 == 0)
            m2 = np.where(null, 1.0, m2)
            if function == "skewness":
                return np.sqrt(n) * cells[:, 1] / np.sqrt(m2 * m2 * m2), null
            return n * cells[:, 2] / (m2 * m2) - 3.0, null
        divisor = n - (1.0 if function.endswith("_samp") else 0.0)
        null = divisor <= 0
        value = m2 / np.where(null, 1.0, divisor)
        return (np.sqrt(value) if function.startswith("stddev") else value), null


def _regression(function: str, n: np.ndarray, x_mean: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ``regr_*`` function's values over the pairs where both columns are non-null (the co-moments of x and y), as
    Spark evaluates it: the sums null without a pair; the slope, intercept and R² null where x is constant, R² 1 where
    only y is."""
    y_mean, ck, xmk, ymk = cells[:, 0], cells[:, 1], cells[:, 2], cells[:, 3]
    if function in ("regr_sxx", "regr_syy", "regr_sxy"):
        return {"regr_sxx": xmk, "regr_syy": ymk, "regr_sxy": ck}[function], n == 0
    flat = xmk == 0
    safe = np.where(flat, 1.0, xmk)
    if function == "regr_slope":
        return ck / safe, flat
    if function == "regr_intercept":
        return y_mean - ck / safe * x_mean, flat
    return np.where(ymk == 0, 1.0, ck * ck / np.where(ymk == 0, 1.0, ymk) / safe), flat
