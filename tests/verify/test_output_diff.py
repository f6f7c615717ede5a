"""The whole-output comparison (verify.output_diff) that the kill tests and the crash soak rely on."""

from collections import Counter
from datetime import datetime

import pyarrow as pa

from misa.io.sink import ParquetBatchSink, final_results
from verify.output_diff import canonical, diff_rows, read_output

REFERENCE = [  # batch 0, then batch 1 updates key 1 (update mode)
    [(datetime(2024, 1, 1), 1, 0.1 + 0.2), (datetime(2024, 1, 1), 2, 2.5)],
    [(datetime(2024, 1, 1), 1, 0.7)],
]


def write(root, batches):
    sink = ParquetBatchSink(root)
    for batch_id, rows in enumerate(batches):
        start, key, value = zip(*rows)
        sink(batch_id, pa.table({"window_start": list(start), "key": list(key), "value": list(value)}))
    return read_output(root)


def test_doubled_row_is_found_though_the_last_row_per_key_is_the_same(tmp_path):
    expected = write(tmp_path / "ref", REFERENCE)
    got = write(tmp_path / "got", [REFERENCE[0] + [REFERENCE[0][1]], REFERENCE[1]])
    key = ["window_start", "key"]
    assert final_results(tmp_path / "got", key) == final_results(tmp_path / "ref", key)  # what the old tests compared
    diff = diff_rows(got.rows, expected.rows)
    assert (diff.lost, diff.extra_rows, diff.doubled) == (0, 1, 1)
    assert "0 reference rows missing, 1 extra rows (1 of them copies" in diff.describe(expected.columns)
    assert "extra: (0, 2024-01-01 00:00:00, 2, 2.5)" in diff.describe()


def test_stale_value_is_one_lost_and_one_extra_row_in_its_batch(tmp_path):
    expected = write(tmp_path / "ref", REFERENCE)
    got = write(tmp_path / "got", [REFERENCE[0], [(datetime(2024, 1, 1), 1, 0.3)]])
    diff = diff_rows(got.rows, expected.rows)
    assert (diff.lost, diff.extra_rows, diff.doubled) == (1, 1, 0)
    assert expected.columns == ("batch_id", "window_start", "key", "value")
    text = diff.describe(expected.columns)
    assert "missing: (1, 2024-01-01 00:00:00, 1, 0.7)" in text and "extra: (1, 2024-01-01 00:00:00, 1, 0.3)" in text


def test_floats_equal_up_to_summation_order_even_across_a_rounding_digit():
    assert diff_rows(Counter([(0, 1, 0.3)]), Counter([(0, 1, 0.1 + 0.2)])).ok
    below, above = 1.2345678849999999, 1.2345678850000001  # round to ...88 and ...89 at 9 digits
    assert canonical(below) != canonical(above)
    assert diff_rows(Counter([(0, canonical(below))]), Counter([(0, canonical(above))])).ok
    assert not diff_rows(Counter([(0, 1.2345)]), Counter([(0, 1.2346)])).ok
    assert not diff_rows(Counter([(1, 0.3)]), Counter([(0, 0.3)])).ok  # another batch is another row
