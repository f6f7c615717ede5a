"""A batch's rows converted to pandas at once give each group what converting the group on its own gives (as Spark's
worker converts a group), and output frames converted in runs give what each converted on its own gives."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from misa.operators.pandas_conversion import PandasConversion

BOUNDS = np.array([0, 2, 3, 6])  # three groups: rows 0-1, 2, 3-5


def rows() -> pa.Table:
    """Six rows of three groups: columns without nulls, with nulls in one group only, nested and timestamps."""
    when = dt.datetime(2026, 3, 8, 9, 30, tzinfo=dt.timezone.utc)  # a day Los Angeles' clocks move
    return pa.table(
        {
            "k": ["a", "a", "b", "c", "c", "c"],
            "n": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
            "nulls": pa.array([1, None, 3, 4, 5, 6], pa.int32()),  # floats in the first group only
            "flag": pa.array([True, False, None, True, True, False]),  # objects in the second group only
            "x": pa.array([0.5, None, 1.5, 2.5, None, 3.5]),
            "s": ["p", None, "q", "r", "s", None],
            "items": pa.array([[1], [2, None], [3], [4], [5], [6]], pa.list_(pa.int64())),
            "at": pa.array([when + dt.timedelta(hours=h) for h in range(6)], pa.timestamp("us", tz="UTC")),
        }
    )


@pytest.mark.parametrize("conversion", [PandasConversion(), PandasConversion("America/Los_Angeles", True)])
def test_group_frames_are_each_groups_own_conversion(conversion):
    table = rows()
    frames = conversion.group_frames(table, BOUNDS)
    assert len(frames) == 3
    for frame, begin, end in zip(frames, BOUNDS[:-1], BOUNDS[1:]):
        alone = pd.concat(conversion.series(table.slice(int(begin), int(end - begin))), axis=1)
        pd.testing.assert_frame_equal(frame, alone, check_exact=True)
    if not conversion.prefer_int_ext_dtype:  # the group's own types, not the batch's
        assert (frames[0]["nulls"].dtype, frames[1]["flag"].dtype) != (
            frames[2]["nulls"].dtype,
            frames[2]["flag"].dtype,
        )


@pytest.mark.parametrize("conversion", [PandasConversion(), PandasConversion("America/Los_Angeles", True)])
def test_key_tuples_are_each_groups_first_values(conversion):
    keys = rows().select(["k", "n", "nulls", "flag", "at"])
    tuples = conversion.key_tuples(keys)
    alone = [tuple(s.iloc[0] for s in conversion.series(keys.slice(i, 1))) for i in range(keys.num_rows)]
    assert [[type(v) for v in t] for t in tuples] == [[type(v) for v in t] for t in alone]
    assert [[None if pd.isna(v) else v for v in t] for t in tuples] == [
        [None if pd.isna(v) else v for v in t] for t in alone
    ]


OUTPUT = T.StructType([T.StructField("k", T.StringType()), T.StructField("n", T.LongType())])


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param([pd.DataFrame({"k": [f"u{i}"], "n": [i]}) for i in range(5)], id="one-type"),
        pytest.param(  # an integer key's null group: floats in one frame, integers in the others
            [pd.DataFrame({"k": ["a"], "n": [1]}), pd.DataFrame({"k": ["b"], "n": [np.nan]})]
            + [pd.DataFrame({"k": ["c"], "n": [2**53 + 1]}), pd.DataFrame({"k": ["d"], "n": [3]})],
            id="types-change",
        ),
        pytest.param(  # objects of floats and integers: the cast fallback, each frame on its own
            [pd.DataFrame({"k": ["a"], "n": pd.Series([1.5], dtype=object)})]
            + [pd.DataFrame({"k": ["b"], "n": pd.Series([2], dtype=object)})],
            id="cast-fallback",
        ),
        pytest.param(
            [pd.DataFrame({"n": [1], "k": ["a"]}), pd.DataFrame({"k": ["b"], "n": [2]})], id="columns-by-name"
        ),
    ],
)
def test_output_tables_are_each_frames_own_conversion(frames):
    conversion = PandasConversion()
    alone = pa.concat_tables([conversion.table(frame, OUTPUT) for frame in frames])
    assert conversion.tables(frames, OUTPUT).equals(alone)
