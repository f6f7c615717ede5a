"""Batches without data from Spark's trigger (misa/runtime/no_data_batches.py): the request source's offsets, a batch
told from Spark's offsets log, a checkpoint without the source refused, and which operators ask for one (end to end
against plain Spark: tests/verify/test_spark_sources.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from common.location import parse
from misa.exceptions import ConfigError
from misa.operators.aggregation import Agg, Aggregation
from misa.operators.base import runs_no_data_batches, watermark_moves
from misa.runtime.no_data_batches import NO_OFFSET, NoDataBatches
from misa.runtime.no_data_source import OFFSET_KEY, NoDataBatchSource

FILE_SOURCE = '{"logOffset":%d}'


def offsets_entry(checkpoint: Path, batch: int, *sources: str) -> None:
    folder = checkpoint / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch)).write_text("\n".join(["v1", '{"batchWatermarkMs":0}', *sources]))


def request(after: int) -> str:
    return json.dumps({OFFSET_KEY: after})


def no_data_batches(tmp_path: Path) -> NoDataBatches:
    """Spark's log and the checkpoint location in one folder (``tmp_path / "ckpt"``), as without the mirror."""
    checkpoint = parse(str(tmp_path / "ckpt"))
    return NoDataBatches(tmp_path / "requests.json", checkpoint, checkpoint)


def test_the_source_moves_only_to_a_newer_request(tmp_path: Path):
    batches = no_data_batches(tmp_path)
    reader = NoDataBatchSource(options={"requests": str(batches.requests)}).streamReader(None)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # no file: no request
    batches.request(4)
    assert reader.latestOffset(start, ReadAllAvailable()) == {OFFSET_KEY: 4}
    assert reader.latestOffset({OFFSET_KEY: 4}, ReadAllAvailable()) == {OFFSET_KEY: 4}  # spent: no new batch
    assert reader.partitions(start, {OFFSET_KEY: 4}) == []


def test_a_batch_is_without_data_when_only_the_request_source_moved(tmp_path: Path):
    checkpoint = tmp_path / "ckpt"
    batches = no_data_batches(tmp_path)
    offsets_entry(checkpoint, 0, FILE_SOURCE % 0, request(-1))
    offsets_entry(checkpoint, 1, FILE_SOURCE % 0, request(0))  # the request alone
    offsets_entry(checkpoint, 2, FILE_SOURCE % 1, request(0))  # new input
    offsets_entry(checkpoint, 3, FILE_SOURCE % 2, request(2))  # new input with a request spent
    assert [batches.is_no_data_batch(b) for b in range(5)] == [False, True, False, False, False]


def test_a_checkpoint_whose_query_ran_without_the_request_source_is_refused_at_start(tmp_path: Path):
    checkpoint = tmp_path / "ckpt"
    offsets_entry(checkpoint, 0, FILE_SOURCE % 0)
    with pytest.raises(ConfigError, match="new checkpoint location"):
        no_data_batches(tmp_path).attach(None, None)  # type: ignore[arg-type]


def test_a_first_batch_planned_for_the_request_source_alone_is_one_spark_does_not_run(tmp_path: Path):
    """Spark's first trigger counts the request source's offset as input: with every other source still without
    an offset (an empty folder) it plans a batch 0 that the stateful query, waiting for its first input, never runs
    (seed 504's join and the live rounds ran misa's batches one id ahead of Spark's). The verdict is kept at the
    checkpoint location, for later starts: Spark purges its offsets log."""
    checkpoint = tmp_path / "ckpt"
    batches = no_data_batches(tmp_path)
    assert not batches.first_batch_skipped()  # a new checkpoint
    offsets_entry(checkpoint, 0, NO_OFFSET, NO_OFFSET, request(-1))  # two folders, both empty
    assert batches.skips_first_batch()
    assert no_data_batches(tmp_path).first_batch_skipped()  # a later start reads it back
    offsets_entry(checkpoint, 0, NO_OFFSET, FILE_SOURCE % 0, request(-1))  # one source had input: Spark runs it
    assert not batches.skips_first_batch()
    assert not no_data_batches(tmp_path).first_batch_skipped()  # the earlier verdict is gone


@pytest.mark.parametrize(("mode", "runs"), [("update", True), ("append", True), ("complete", False)])
def test_an_aggregation_asks_for_batches_without_data_as_sparks_does_in_its_mode(mode: str, runs: bool):
    aggregation = Aggregation(["k"], [Agg("n", "count", "v")], "t", "10 seconds", output_mode=mode)
    assert runs_no_data_batches(aggregation) is runs


def test_the_operators_watermark_moves_once_a_batch_saw_a_later_event():
    aggregation = Aggregation(["k"], [Agg("n", "count", "v")], "t", "10 seconds", watermark_delay="5s")
    assert not watermark_moves(aggregation)
    aggregation.watermark.observe(20_000_000)
    assert watermark_moves(aggregation)
    aggregation.watermark.advance()
    assert not watermark_moves(aggregation)
