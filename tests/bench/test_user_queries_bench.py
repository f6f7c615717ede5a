"""``misa bench queries``: the backlog's shape and the table (the bench itself runs on demand)."""

import pyarrow.parquet as pq

from bench.user_queries import generate, table


def test_the_backlog_has_its_files_rows_keys_a_tenth_of_rows_out_of_order_and_two_sides(tmp_path):
    generate(tmp_path / "input", files=3, records=2_000, keys=500, file_seconds=5)
    files = sorted((tmp_path / "input").iterdir())
    assert len(files) == 3
    tables = [pq.read_table(f) for f in files]
    assert all(t.num_rows == 2_000 for t in tables)
    users = {u for t in tables for u in t["user"].to_pylist()}
    assert 450 <= len(users) <= 500 and all(u.startswith("u") for u in users)
    late = 0
    for i, t in enumerate(tables):
        times = t["t"].to_pylist()
        assert max(times) < (i + 1) * 5_000 and min(times) >= max(0, i * 5_000 - 5_000)
        late += sum(1 for a, b in zip(times, times[1:]) if b < a)  # a row earlier than the one before it
    assert 0.05 * 6_000 <= late <= 0.15 * 6_000
    sides = [s for t in tables for s in t["side"].to_pylist()]
    assert set(sides) == {0, 1} and 0.4 * 6_000 <= sum(sides) <= 0.6 * 6_000


def test_the_table_gives_each_engines_wall_and_batch_percentiles_and_misas_ratios():
    rows = [
        {"query": "session", "engine": "spark", "repeat": 0, "wall_s": 10.0, "batch_ms": [100.0, 200.0, 300.0]},
        {"query": "session", "engine": "misa", "repeat": 0, "wall_s": 5.0, "batch_ms": [50.0, 100.0, 150.0]},
    ]
    lines = table(rows).splitlines()
    assert lines[2].startswith("| session | spark | 1 | - | 10.0 | 200 | 298 | - |")
    assert lines[3] == "| session | misa | 1 | - | 5.0 | 100 | 149 | 0.50 | 0.50 | 0.50 |"
