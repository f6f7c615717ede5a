"""JSON lines read on the driver with Arrow (the next batch's hint rows): the records parse_json_lines keeps."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from misa.io.json_arrow import read_json_lines_arrow

SCHEMA = StructType([StructField("k", LongType()), StructField("v", DoubleType()), StructField("s", StringType())])


def test_records_are_read_as_the_schema_and_those_missing_a_required_field_left_out(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"k": 1, "v": 0.5, "extra": true}\n\n{"v": 2.0}\n')  # a blank line; a record without k
    b.write_text('{"k": 3, "s": "x"}\n{"k": null, "v": 1.0}\n')
    table = read_json_lines_arrow([f"file://{a}", str(b)], SCHEMA, required=("k",))
    assert table.schema.names == ["k", "v", "s"]
    assert table.to_pylist() == [{"k": 1, "v": 0.5, "s": None}, {"k": 3, "v": None, "s": "x"}]


def test_no_files_give_no_rows_with_the_schema():
    table = read_json_lines_arrow([], SCHEMA)
    assert table.num_rows == 0 and table.schema.names == ["k", "v", "s"]


@pytest.mark.parametrize("line", ['{"k": 1, "v": ', '{"k": "one"}'], ids=["malformed", "wrong-type"])
def test_a_record_spark_would_set_aside_fails_the_read(tmp_path, line):
    (tmp_path / "a.json").write_text('{"k": 1}\n' + line + "\n")
    with pytest.raises(pa.ArrowInvalid):
        read_json_lines_arrow([str(tmp_path / "a.json")], SCHEMA)
