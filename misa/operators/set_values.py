"""Values as Spark's hash sets and maps take them (collect_set, mode): -0.0 and 0.0 one value, every NaN one."""

from __future__ import annotations

import math
from typing import Any, Hashable

NAN_KEY = ("NaN",)  # collect_set's key of every NaN (Spark's collect_set keeps one)


def set_value(value: Any) -> Any:
    """A value as Spark's collect_set keeps it: floating values normalized (-0.0 as 0.0; in arrays and structs too)."""
    if isinstance(value, float):
        return 0.0 if value == 0 else value
    if isinstance(value, list):
        return [set_value(v) for v in value]
    if isinstance(value, dict):
        return {k: set_value(v) for k, v in value.items()}
    return value


def set_key(value: Any) -> Hashable:
    """A key equal for the values Spark's collect_set takes as one: -0.0 and 0.0, every NaN (arrays and structs too:
    element by element, field by field)."""
    if isinstance(value, float) and math.isnan(value):
        return NAN_KEY
    if isinstance(value, list):
        return ("array", tuple(set_key(v) for v in value))
    if isinstance(value, dict):
        return ("struct", tuple((k, set_key(v)) for k, v in value.items()))
    return value


def set_union(kept: list[Any], more: list[Any]) -> list[Any]:
    """collect_set's values ``kept``, then those of ``more`` it does not hold yet, as Spark's set takes them
    (:func:`set_key`: -0.0 and 0.0 one value, every NaN one)."""
    keys = {set_key(v) for v in kept}
    union = list(kept)
    for value in more:
        key = set_key(value)
        if key not in keys:
            keys.add(key)
            union.append(set_value(value))
    return union
