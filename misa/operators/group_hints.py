"""Keyed prefetch hints of operators whose state keys are a prefix and the group key: session windows, the
deduplications, the stream-stream join, Spark's stateful processor (:class:`misa.operators.base.HintSource`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from misa.state.codec import KeyCodec, normalize_float_keys
from prefetch.hints import HINT_TS, no_hints


def group_hint_keys(
    hints: pa.Table, columns: Sequence[str], prefixes: Sequence[bytes], times_us: np.ndarray | None = None
) -> tuple[list[bytes], np.ndarray]:
    """For each prefix, the state keys ``prefix ++ group key`` of the hint rows (the group key behind ``times_us``
    when the key holds a time, as :class:`~misa.state.codec.KeyCodec` writes it), with the rows' hint timestamps."""
    if not hints.num_rows:
        return no_hints()
    rows = normalize_float_keys(hints.select(list(columns)), list(columns))
    codec = KeyCodec([rows.schema.field(c) for c in columns], windowed=times_us is not None)
    groups = codec.encode(times_us, [rows[c].combine_chunks() for c in columns], rows.num_rows)
    stamps = hints[HINT_TS].to_numpy()
    return [p + g for p in prefixes for g in groups], np.tile(stamps, len(prefixes))
