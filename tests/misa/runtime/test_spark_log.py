"""The one reader of Spark's checkpoint logs, on a checkpoint folder laid out as Spark writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.location import parse
from misa.runtime.spark_log import SourceFile, SparkCheckpointLog
from misa.state.store import EMPTY_VERSION


def source_entry(folder: Path, name: str, files: dict[int, list[str]]) -> None:
    """A file source's log entry: the log's version, then one JSON record per file with its source batch."""
    records = [
        json.dumps({"path": f"file:///in/{n}", "timestamp": 0, "batchId": b}) for b, ns in files.items() for n in ns
    ]
    (folder / name).write_text("\n".join(["v1", *records]))
    (folder / f".{name}.crc").write_text("checksum")  # Hadoop's local file system keeps one beside each entry


def offsets_entry(checkpoint: Path, batch: int, log_offset: int) -> None:
    """An offsets entry: the version, the batch's metadata, then one line per source (a file source, then Kafka)."""
    metadata = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1000 * batch, "conf": {}})
    lines = ["v1", metadata, json.dumps({"logOffset": log_offset}), json.dumps({"topic": {"0": 5}})]
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(lines))


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """Batches 0..3 planned, 0..2 committed. The file source's batches 0..3 were compacted into ``3.compact``
    (entries 0..2 still there, as Spark deletes them later); batch 2 read source batches 2 and 3 (a restart
    between them), batch 3 read nothing new, batch 4's source entry 4 is logged but its offsets are not."""
    root = tmp_path / "ckpt"
    for folder in ("offsets", "commits", "sources/0", "sources/1"):
        (root / folder).mkdir(parents=True)
    (root / "metadata").write_text(json.dumps({"id": "query-1"}))
    source = root / "sources" / "0"
    source_entry(source, "0", {0: ["a"]})
    source_entry(source, "1", {1: ["b", "c"]})
    source_entry(source, "2", {2: ["d"]})
    source_entry(source, "3.compact", {0: ["a"], 1: ["b", "c"], 2: ["d"], 3: ["e"]})
    source_entry(source, "4", {4: ["f"]})
    (root / "sources" / "1" / "0").write_text('v1\n{"topic":{"0":0}}')  # Kafka's initial offsets: no file source
    for batch, log_offset in enumerate([0, 1, 3, 3]):
        offsets_entry(root, batch, log_offset)
    for batch in range(3):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "commits" / ".3.0123abcd-0123-0123-0123-0123456789ab.tmp").write_text("")  # a killed driver's
    return root


def test_the_batch_ids_and_the_last_commit(checkpoint):
    log = SparkCheckpointLog(checkpoint)
    assert log.batch_ids("offsets") == [0, 1, 2, 3] and log.batch_ids("commits") == [0, 1, 2]
    assert log.last_committed() == 2
    assert SparkCheckpointLog(checkpoint.parent / "new").last_committed() == EMPTY_VERSION
    assert log.query_id() == "query-1"


def test_the_offsets_of_a_batch_name_each_file_source_log_offset(checkpoint):
    assert SparkCheckpointLog(checkpoint).file_source_offsets(2) == {0: 3}  # Kafka's line has none


def test_the_source_entries_leave_out_what_a_compact_entry_repeats(checkpoint):
    log = SparkCheckpointLog(checkpoint)
    entries = log.source_entries()
    assert [e.number for e in entries] == [3, 4]
    assert entries[0].files[-1] == SourceFile("file:///in/e", 3) and entries[0].files[-1].name == "e"
    assert [e.number for e in log.source_entries(after=3)] == [4]
    assert log.source_entries(after=4) == [] and log.source_entries(source=7) == []


def test_the_files_of_each_batch_follow_the_offsets_log(checkpoint):
    names = {b: [f.name for f in files] for b, files in SparkCheckpointLog(checkpoint).batch_files().items()}
    assert names == {0: ["a"], 1: ["b", "c"], 2: ["d", "e"]}  # 3 read nothing; 4 is not planned


@pytest.mark.parametrize("form", [str, Path, parse, lambda p: f"file://{p}"])
def test_every_form_of_the_location_reads_the_same_log(checkpoint, form):
    assert SparkCheckpointLog(form(checkpoint)).last_committed() == 2


def test_recovery_trims_only_what_the_newest_offsets_did_not_plan(checkpoint):
    """Source entry 4 is past the newest offsets' logOffset (3): removed with its checksum; the rest stays."""
    log = SparkCheckpointLog(checkpoint)
    log.forget_unplanned_source_entries()
    log.remove_abandoned_temp_files()
    assert [e.number for e in log.source_entries()] == [3]
    assert not (checkpoint / "sources" / "0" / ".4.crc").exists()
    assert (checkpoint / "sources" / "1" / "0").exists()
    assert sorted(p.name for p in (checkpoint / "commits").iterdir()) == ["0", "1", "2"]
