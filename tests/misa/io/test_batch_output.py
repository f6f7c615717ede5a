"""Per-batch output folders: attempt files, a pointer written last, any location."""

from pathlib import Path

import pyarrow as pa
import pytest

from checkpoint.exceptions import LinkedPathError
from misa.io import batch_output
from misa.io.batch_output import BatchFolders
from misa.io.quarantine import Quarantine, read_quarantine
from misa.io.sink import ParquetBatchSink, read_batches


def rows(table_or_batches) -> list[tuple[int, list[int]]]:
    return [(batch_id, table.column("x").to_pylist()) for batch_id, table in table_or_batches]


@pytest.fixture(params=["file", "s3"])
def root(request, tmp_path) -> str:
    return str(tmp_path / "out") if request.param == "file" else request.getfixturevalue("s3_url") + "/out"


def test_a_replay_replaces_the_batch_whole(root):
    sink = ParquetBatchSink(root)
    sink(0, pa.table({"x": [1, 2]}))
    sink(1, pa.table({"x": [3]}))
    sink(1, pa.table({"x": [4, 5]}))  # a replay of batch 1
    assert rows(read_batches(root)) == [(0, [1, 2]), (1, [4, 5])]


def test_a_crash_before_the_pointer_leaves_the_previous_attempt_whole(root, monkeypatch):
    sink = ParquetBatchSink(root)
    sink(0, pa.table({"x": [1, 2]}))
    real_write = BatchFolders._write

    def crash_at_pointer(self, path, data):
        if path.endswith(batch_output.POINTER):
            raise OSError("killed before the pointer")
        real_write(self, path, data)

    monkeypatch.setattr(BatchFolders, "_write", crash_at_pointer)
    with pytest.raises(OSError, match="killed before the pointer"):
        sink(0, pa.table({"x": [7, 8, 9]}))  # the replay's data file is written, its pointer is not
    monkeypatch.undo()
    assert rows(read_batches(root)) == [(0, [1, 2])]
    sink(0, pa.table({"x": [7, 8, 9]}))  # the restart's attempt
    assert rows(read_batches(root)) == [(0, [7, 8, 9])]


def test_earlier_attempts_files_are_removed_after_the_pointer_moves(tmp_path):
    sink = ParquetBatchSink(tmp_path / "out")
    for attempt in range(3):
        sink(4, pa.table({"x": [attempt]}))
    names = sorted(p.name for p in (tmp_path / "out" / "batch_id=4").iterdir())
    assert len(names) == 2 and names[0] == batch_output.POINTER and names[1].endswith(".parquet")


@pytest.mark.parametrize("form", ["{p}", "file:{p}", "file://{p}"])
def test_every_local_form_writes_the_same_place(tmp_path, form):
    ParquetBatchSink(form.format(p=tmp_path / "out"))(0, pa.table({"x": [1]}))
    assert rows(read_batches(tmp_path / "out")) == [(0, [1])]


def test_a_quarantine_replay_with_fewer_or_no_bad_lines_shows_only_those(root):
    quarantine = Quarantine(root)
    quarantine._write(2, ["a", "b"])
    quarantine._write(3, ["c"])
    quarantine._write(2, ["b"])
    assert read_quarantine(root) == ["b", "c"]
    quarantine._write(2, [])
    assert read_quarantine(root) == ["c"]
    quarantine._write(5, [])  # never had lines: nothing to remove
    assert read_quarantine(root) == ["c"]


def test_a_local_batch_folder_holds_no_temporary_file_after_a_commit(tmp_path):
    ParquetBatchSink(tmp_path / "out")(0, pa.table({"x": [1]}))
    assert not [p for p in Path(tmp_path / "out").rglob("*.tmp")]


# ---------------------------------------------------------------- links out of the root
WRITERS = {
    "sink": lambda root, batch_id: ParquetBatchSink(root)(batch_id, pa.table({"x": [1]})),
    "quarantine": lambda root, batch_id: Quarantine(root)._write(batch_id, ["bad line"]),
    "quarantine-none": lambda root, batch_id: Quarantine(root)._write(batch_id, []),  # removes the batch's output
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_batch_folder_that_is_a_link_is_refused_and_its_target_untouched(tmp_path, writer):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    (victim / batch_output.POINTER).write_text('{"batch_id": 3, "attempt": "x", "files": ["precious.txt"]}')
    root = tmp_path / "out"
    root.mkdir()
    (root / "batch_id=3").symlink_to(victim)
    with pytest.raises(LinkedPathError, match="batch_id=3"):
        WRITERS[writer](root, 3)
    assert sorted(p.name for p in victim.iterdir()) == [batch_output.POINTER, "precious.txt"]
    assert (victim / "precious.txt").read_text() == "keep me"
    with pytest.raises(LinkedPathError, match="batch_id=3"):
        read_batches(root)  # a reader does not follow it either
    WRITERS[writer](root, 4)  # other batches are written as before
