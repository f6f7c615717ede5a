"""Reading the Parquet sink's output from a script of the user's own."""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

from misa.io.sink import ParquetBatchSink, final_results, read_batches

READ = """
import sys
from misa import read_batches
print(sum(table.num_rows for _, table in read_batches(sys.argv[1])))
"""

NEW_THREADS = """
import os
import sys
from misa import read_batches
before = len(os.listdir("/proc/self/task"))
read_batches(sys.argv[1])
print(len(os.listdir("/proc/self/task")) - before)
"""


def write_batches(root: Path) -> None:
    sink = ParquetBatchSink(str(root))
    for batch_id in range(3):
        sink(batch_id, pa.table({"k": [1, 2, batch_id + 10], "v": [float(batch_id)] * 3}))


def test_the_output_is_read_per_batch_and_folded_per_key(tmp_path):
    write_batches(tmp_path / "out")
    assert [(b, t.num_rows) for b, t in read_batches(tmp_path / "out")] == [(0, 3), (1, 3), (2, 3)]
    final = final_results(tmp_path / "out", ["k"])
    assert final[(1,)] == {"k": 1, "v": 2.0} and final[(10,)] == {"k": 10, "v": 0.0} and len(final) == 5


def run_script(code: str, out: Path) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter from the repository's root, with ``out`` as its argument."""
    root = Path(__file__).resolve().parents[3]
    return subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, cwd=root)


@pytest.mark.slow  # 20 interpreters; make test runs the test of the cause below
def test_a_script_that_reads_the_output_exits_cleanly(tmp_path):
    """When an Arrow pool thread still held the input after ``read_batches`` returned, such a script aborted at exit
    (status -6, ``terminate called without an active exception``) in up to 40 % of runs or in none, depending on the
    machine and its load: 20 runs, 4 at a time, from a user's side. The test below catches the cause on every run."""
    write_batches(tmp_path / "out")

    def run(_: int) -> subprocess.CompletedProcess:
        return run_script(READ, tmp_path / "out")

    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(run, range(20)))
    failed = [r for r in runs if (r.returncode, r.stdout.strip()) != (0, "9")]
    assert not failed, f"{len(failed)} of 20 failed: {failed[0].returncode} {failed[0].stderr[-2000:]}"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_reading_the_output_leaves_no_arrow_thread_behind(tmp_path):
    """``pq.read_table`` ran callbacks on Arrow's CPU pool even with ``use_threads=False``: a pool thread could drop
    the last reference to the input's Python bytes after ``read_batches`` returned, ask for the GIL while the
    interpreter finalized, and be ended inside a ``noexcept`` destructor (the abort above, a window of about a
    millisecond). Without a thread started by the read, no thread can hold the input."""
    write_batches(tmp_path / "out")
    result = run_script(NEW_THREADS, tmp_path / "out")
    assert (result.returncode, result.stdout.strip()) == (0, "0"), result.stderr[-2000:]


EVENTS = pa.table(
    {
        "k": pa.array([3, 1, None, 2], pa.int64()),
        "at": pa.array([4_000_000, 1_000_000, 2_000_000, 3_000_000], pa.timestamp("us", tz="UTC")),
        "v": pa.array([0.5, None, 1.5, 2.5]),
    }
)


def test_a_batch_given_as_a_dataframe_is_written_by_sparks_tasks_as_the_table_would_be(spark, tmp_path):
    """The state on the executors hands the sink a DataFrame: the files are Spark's tasks', the rows and columns
    the same as from the table, sorted into one file when the sink sorts; a replay replaces the batch whole."""
    frame = spark.createDataFrame(EVENTS).repartition(3)
    for sort_by in ((), (("k", "ascending"),)):
        from_table, from_frame = tmp_path / f"table{len(sort_by)}", tmp_path / f"frame{len(sort_by)}"
        ParquetBatchSink(from_table, sort_by)(7, EVENTS)
        sink = ParquetBatchSink(from_frame, sort_by)
        sink.write_frame(7, frame.limit(1))  # an attempt the replay below replaces
        sink.write_frame(7, frame)
        [(batch, table)] = read_batches(from_frame)
        expected = read_batches(from_table)[0][1]
        assert batch == 7 and table.schema == expected.schema
        if sort_by:
            assert table.to_pylist() == expected.to_pylist()
            assert len(list((from_frame / "batch_id=7").glob("*.parquet"))) == 1
        else:
            assert sorted(map(str, table.to_pylist())) == sorted(map(str, expected.to_pylist()))
    ParquetBatchSink(tmp_path / "empty")(0, EVENTS.slice(0, 0))
    sink = ParquetBatchSink(tmp_path / "none")
    sink.write_frame(0, frame.limit(0))
    assert read_batches(tmp_path / "none")[0][1].schema == read_batches(tmp_path / "empty")[0][1].schema
