"""The next batch's input read ahead: the files that arrived and that Spark's source log gives to no batch yet."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
from pyspark.sql.types import LongType, StructField, StructType

from misa.io.json_arrow import read_json_lines_arrow
from misa.runtime.next_input import FileSourcePeek

SCHEMA = StructType([StructField("k", LongType())])


def arrive(folder: Path, name: str, mtime: int) -> None:
    (folder / name).write_text("{}\n")
    os.utime(folder / name, (mtime, mtime))


def log_entry(checkpoint: Path, entry: str, batches: dict[int, list[str]]) -> None:
    """Spark's file source log entry ``entry``: one JSON line per file with the batch that read it."""
    folder = checkpoint / "sources" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["v1"] + [
        json.dumps({"path": f"file://{checkpoint.parent}/in/{n}", "timestamp": 0, "batchId": b})
        for b, names in batches.items()
        for n in names
    ]
    (folder / entry).write_text("\n".join(lines))


def names(peek) -> list[str]:
    return [Path(f).name for f in peek.files]


def test_the_peek_names_arrived_files_no_batch_read_and_reads_them_as_a_batch(tmp_path):
    inp, ckpt = tmp_path / "in", tmp_path / "ckpt"
    inp.mkdir()
    for i, name in enumerate(["part-0.json", "part-1.json", ".part-2.json.tmp", "_SUCCESS"]):
        arrive(inp, name, 100 + i)
    read: list[list[str]] = []
    peek = FileSourcePeek(str(inp), str(ckpt), lambda files: read.append(files) or "rows")
    first = peek.peek()  # no batch planned yet: everything that arrived, hidden and temporary names left out
    assert names(first) == ["part-0.json", "part-1.json"] and first.frame == "rows" and not first.reason
    assert read == [list(first.files)] and all(f.startswith("file://") for f in first.files)
    log_entry(ckpt, "0", {0: ["part-0.json", "part-1.json"]})
    assert peek.peek().reason == "no new files"
    arrive(inp, "part-3.json", 104)
    arrive(inp, "part-4.json", 103)
    assert names(peek.peek()) == ["part-4.json", "part-3.json"]  # oldest first
    log_entry(ckpt, "1", {1: ["part-4.json"]})
    (ckpt / "sources" / "0" / ".1.crc").write_text("ignored")
    assert names(peek.peek()) == ["part-3.json"]


def test_with_max_files_per_trigger_only_the_oldest_files_are_the_next_batch(tmp_path):
    inp, ckpt = tmp_path / "in", tmp_path / "ckpt"
    inp.mkdir()
    for i in range(5):
        arrive(inp, f"part-{i}.json", 200 - i)  # part-4 is the oldest
    log_entry(ckpt, "1.compact", {0: ["part-4.json"], 1: ["part-3.json"]})  # a compact entry repeats all before it
    assert names(FileSourcePeek(str(inp), str(ckpt), lambda files: files, max_files=2).peek()) == [
        "part-2.json",
        "part-1.json",
    ]


def test_a_folder_that_cannot_be_listed_gives_no_hints_and_a_reason(tmp_path):
    peek = FileSourcePeek(str(tmp_path / "missing"), str(tmp_path / "ckpt"), lambda files: files)
    found = peek.peek()
    assert found.frame is None and found.files == () and found.reason == "unreadable"


def test_files_already_seen_are_skipped_but_still_fill_the_next_batch(tmp_path):
    """Between batches the peek is repeated as files arrive: files hinted already are not read again, and
    with maxFilesPerTrigger they still take their place in the next batch."""
    inp, ckpt = tmp_path / "in", tmp_path / "ckpt"
    inp.mkdir()
    arrive(inp, "part-0.json", 100)
    peek = FileSourcePeek(str(inp), str(ckpt), lambda files: files, max_files=2)
    first = peek.peek()
    arrive(inp, "part-1.json", 101)
    arrive(inp, "part-2.json", 102)
    second = peek.peek(frozenset(first.files))
    assert names(first) == ["part-0.json"] and names(second) == ["part-1.json"]
    assert second.frame == list(second.files)  # only the new file is read
    assert peek.peek(frozenset(first.files + second.files)).reason == "no new files"  # part-2 is a later batch's


def test_hint_rows_read_on_the_driver_spare_spark_and_a_file_pyarrow_cannot_read_goes_to_spark(tmp_path):
    inp, ckpt = tmp_path / "in", tmp_path / "ckpt"
    inp.mkdir()
    arrive(inp, "part-0.json", 100)
    spark_reads: list[list[str]] = []

    def hint_rows(files: list[str]) -> pa.Table:
        return read_json_lines_arrow(files, SCHEMA, ("k",))

    peek = FileSourcePeek(str(inp), str(ckpt), lambda f: spark_reads.append(f) or "rows", hint_rows=hint_rows)
    (inp / "part-0.json").write_text('{"k": 1}\n{"k": 2}\n')
    first = peek.peek()
    assert first.hint_rows is not None and first.hint_rows.column("k").to_pylist() == [1, 2]
    assert first.frame is None and spark_reads == []
    (inp / "part-0.json").write_text('{"k": 1}\n{"k": \n')  # a malformed line: Spark sets it aside, pyarrow fails
    second = peek.peek()
    assert second.hint_rows is None and second.frame == "rows" and len(spark_reads) == 1
