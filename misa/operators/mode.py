"""``mode(col)``: the most frequent non-null value, as Spark's ``Mode`` computes it.

A state is the group's counts per value, ``{key: [value, count]}``, merged across batches and panes by adding counts
(whatever their order). Values are taken as Spark's hash map takes them (:func:`~misa.operators.set_values.set_key`:
-0.0 and 0.0 one value, kept as 0.0; every NaN one). The result is the value of the greatest count, null when every
input is null; on a tie:

* ``mode`` (Spark's ``mode(col, true)``, ``mode() WITHIN GROUP (ORDER BY col)``): the lowest value in Spark's order
  (NaN above every double); Spark's ``mode(col)`` returns any of them (its hash map's order), misa the lowest;
* ``mode_highest`` (``mode() WITHIN GROUP (ORDER BY col DESC)``): the highest.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Hashable, Sequence

from misa.operators.extremum_by import spark_rank
from misa.operators.set_values import set_key, set_value

MODE_FUNCTIONS = ("mode", "mode_highest")
Counts = dict[Hashable, list[Any]]  # key -> [value, count]


def counts_of(values: Sequence[Any]) -> Counts:
    """The counts of a group's non-null ``values`` (a batch's, or a pane's)."""
    found: Counter[Hashable] = Counter()
    kept: dict[Hashable, Any] = {}
    for value in values:
        if value is None:
            continue
        key = set_key(value)
        found[key] += 1
        kept.setdefault(key, set_value(value))
    return {key: [kept[key], count] for key, count in found.items()}


def merge_counts(a: Counts, b: Counts) -> Counts:
    """The counts of ``a``'s rows and ``b``'s together (a new dict: states are shared between versions)."""
    merged = {key: list(entry) for key, entry in a.items()}
    for key, (value, count) in b.items():
        if key in merged:
            merged[key][1] += count
        else:
            merged[key] = [value, count]
    return merged


def mode_of(function: str, counts: Counts) -> Any:
    """The value of the greatest count (null for no value); a tie to the lowest (``mode_highest``: highest)."""
    if not counts:
        return None
    top = max(count for _, count in counts.values())
    tied = [value for value, count in counts.values() if count == top]
    return max(tied, key=spark_rank) if function == "mode_highest" else min(tied, key=spark_rank)
