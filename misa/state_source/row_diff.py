"""The change feed's rows: what one version's state rows changed against the version before, row by row."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

UPDATE, DELETE = "update", "delete"  # Spark's change types


def _identity(value: Any) -> str:
    """A state row's key or value as a comparable text (rows hold lists, maps, floats)."""
    return json.dumps(value, sort_keys=True, default=repr)


def _indices(rows: list[int]) -> pa.Array:
    return pa.array(rows, pa.int64())


def changed_rows(old: pa.Table, new: pa.Table) -> pa.Table:
    """Rows of ``new`` whose key is not in ``old`` or whose value differs (``update``), then rows of ``old`` whose key
    is not in ``new`` (``delete``, value null); columns ``change_type``, ``key``, ``value``."""
    old_keys = [_identity(k) for k in old["key"].to_pylist()]
    before = dict(zip(old_keys, map(_identity, old["value"].to_pylist())))
    new_keys = [_identity(k) for k in new["key"].to_pylist()]
    new_values = [_identity(v) for v in new["value"].to_pylist()]
    updated = [i for i, (k, v) in enumerate(zip(new_keys, new_values)) if before.get(k) != v]
    kept = set(new_keys)
    deleted = [i for i, k in enumerate(old_keys) if k not in kept]
    value_type = new.schema.field("value").type
    return pa.table(
        {
            "change_type": pa.array([UPDATE] * len(updated) + [DELETE] * len(deleted), pa.string()),
            "key": pa.concat_arrays(
                [
                    new["key"].combine_chunks().take(_indices(updated)),
                    old["key"].combine_chunks().take(_indices(deleted)),
                ]
            ),
            "value": pa.concat_arrays(
                [new["value"].combine_chunks().take(_indices(updated)), pa.nulls(len(deleted), value_type)]
            ),
        }
    )
