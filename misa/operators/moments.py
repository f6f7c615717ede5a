"""Spark's standard deviation and variance functions, kept as central moments.

``stddev`` / ``stddev_samp``, ``stddev_pop``, ``variance`` / ``var_samp`` and ``var_pop`` of a group are computed
from its count ``n``, its mean and ``m2``, the sum of squared deviations from the mean, as Spark's
``CentralMomentAgg`` computes them: over doubles (Spark casts the input), each batch's partial moments from Spark,
merged with the group's state by Chan's formula (:class:`misa.state.codec.AggStates`, also combining the panes of
a sliding window). The results are Spark's: null without inputs, and for the sample functions null for one input
(``spark.sql.legacy.statisticalAggregate=false``, Spark's default).
"""

from __future__ import annotations

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

MOMENT_FUNCTIONS = ("stddev_samp", "stddev_pop", "var_samp", "var_pop")


def moment_partials(column: Column) -> tuple[Column, Column]:
    """The mean and m2 of a group of rows' values (cast to double, as Spark casts them)."""
    x = column.cast("double")
    return F.avg(x), F.var_pop(x) * F.count(x)


def moment_results(function: str, count: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``function``'s values of groups of ``count`` inputs with ``m2``, and where they are null (Spark's
    ``m2 / n`` or ``m2 / (n - 1)``, its square root for a standard deviation)."""
    divisor = count.astype(np.float64) - (1.0 if function.endswith("_samp") else 0.0)
    null = divisor <= 0
    value = m2 / np.where(null, 1.0, divisor)
    return (np.sqrt(value) if function.startswith("stddev") else value), null
