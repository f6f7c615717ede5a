"""Spark's ``approx_top_k``, ``approx_top_k_accumulate`` and ``approx_top_k_combine`` over misa's states.

A batch's partial of a group is Spark's own ``approx_top_k_accumulate`` (``approx_top_k_combine``) of the group's
rows: its state struct, whose ``sketch`` is Spark's aggregation buffer (a frequent-items sketch image, then the
count of null items as a big-endian long). misa keeps that struct as the state and merges it as Spark's streaming
aggregation does: into a fresh buffer, the stored buffer first, then the batch's (:mod:`.frequent_items` repeats
Java's sketch), and outputs what Spark's final aggregation gives from the stored buffer, merged into a fresh one:
the state struct, or (``approx_top_k``) the ``k`` most frequent items, a null item among them by its count.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from misa.exceptions import MisaError
from misa.operators.frequent_items import FrequentItems
from misa.operators.java_items import item_type

FUNCTIONS = ("approx_top_k", "approx_top_k_accumulate", "approx_top_k_combine")
KINDS = dict(zip(("ApproxTopK", "ApproxTopKAccumulate", "ApproxTopKCombine"), FUNCTIONS))
UNSIZED, LARGEST = -1, 1_000_000  # approx_top_k_combine without maxItemsTracked; Spark's largest size
NULLS = struct.Struct(">q")  # the count of null items after the sketch's image


class ApproxTopKMergeError(MisaError, ValueError):
    """Two states of one group cannot be combined, as Spark fails the same query."""


def max_items(function: str, constants: tuple[Any, ...]) -> int:
    """The sketch's maxItemsTracked: approx_top_k's (k, maxItemsTracked); the others' (maxItemsTracked)."""
    size = constants[1] if function == "approx_top_k" else constants[0]
    return LARGEST if size == UNSIZED else size


def lg_map_size(max_items_tracked: int) -> int:
    """Spark's ``calMaxMapSize`` as a power of 2: the least map whose 3/4 holds ``max_items_tracked``."""
    return math.ceil(math.log2(math.ceil(max_items_tracked / 0.75)))


def partial(function: str, constants: tuple[Any, ...], column: Column) -> Column:
    """Spark's state struct of a group's rows (approx_top_k's: its accumulation)."""
    if function == "approx_top_k_combine":
        sized = [] if constants[0] == UNSIZED else [F.lit(constants[0])]
        return F.call_function("approx_top_k_combine", column, *sized)
    return F.call_function("approx_top_k_accumulate", column, F.lit(max_items(function, constants)))


def merge(function: str, constants: tuple[Any, ...], stored: dict | None, batch: dict) -> dict:
    """Spark's merge of the stored state struct and the batch's into a fresh buffer (combine's sizes checked)."""
    if function == "approx_top_k_combine" and constants[0] == UNSIZED and stored is not None:
        if stored["maxItemsTracked"] != batch["maxItemsTracked"]:
            raise ApproxTopKMergeError(
                f"[APPROX_TOP_K_SKETCH_SIZE_NOT_MATCH] approx_top_k_combine: sketches of maxItemsTracked "
                f"{stored['maxItemsTracked']} and {batch['maxItemsTracked']} in one group; give approx_top_k_combine "
                "its maxItemsTracked, or accumulate every sketch with one size"
            )
    states = [batch] if stored is None else [stored, batch]
    return {**batch, "sketch": _image(*_fold(function, constants, states))}


def result(function: str, constants: tuple[Any, ...], state: dict) -> Any:
    """What Spark's final aggregation gives of a stored state: the state struct, or approx_top_k's items."""
    sketch, nulls = _fold(function, constants, [state])
    if function != "approx_top_k":
        return {**state, "sketch": _image(sketch, nulls)}
    rows = [{"item": item, "count": estimate} for item, estimate in sketch.frequent()]
    if nulls:  # the null item before the first less frequent one (after those as frequent)
        place = next((i for i, row in enumerate(rows) if row["count"] < nulls), len(rows))
        rows.insert(place, {"item": None, "count": nulls})
    value = sketch.items.value
    return [{**row, "item": value(row["item"])} if row["item"] is not None else row for row in rows[: constants[0]]]


def result_type(state_type: pa.DataType) -> pa.DataType:
    """approx_top_k's result (an array of item and count) of its state struct's type."""
    item = state_type.field("itemDataType").type
    return pa.list_(pa.struct([pa.field("item", item), pa.field("count", pa.int64(), nullable=False)]))


def _fold(function: str, constants: tuple[Any, ...], states: list[dict]) -> tuple[FrequentItems, int]:
    """A fresh sketch of the function's size with each state's merged into it in turn, and their null count."""
    items = item_type(states[0]["itemDataTypeDDL"])
    sketch, nulls = FrequentItems(items, lg_map_size(max_items(function, constants))), 0
    for state in states:
        image = state["sketch"]
        sketch.merge(FrequentItems.from_bytes(items, image[: -NULLS.size]))
        nulls += NULLS.unpack_from(image, len(image) - NULLS.size)[0]
    return sketch, nulls


def _image(sketch: FrequentItems, nulls: int) -> bytes:
    """Spark's aggregation buffer: the sketch's image, then the null count."""
    return sketch.to_bytes() + NULLS.pack(nulls)
