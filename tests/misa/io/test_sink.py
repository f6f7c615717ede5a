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
