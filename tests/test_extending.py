"""docs/extending.md's examples, run as written: a custom operator in a streaming query with a plain sink,
a DataFrameSink and the Parquet sink, a batch replayed after a restart, every batch equal to plain Spark's."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import functions as F

from misa import DataFrameSink, MisaConfig, ParquetBatchSink, StatefulJob, read_batches, read_quarantine

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "k long, v long"
FILES = [  # one batch each; nulls are skipped by the operator and by the reference alike
    [(1, 10), (2, 5), (1, 3), (None, 99)],
    [(1, 7), (3, -4), (2, None)],
    [(2, 8), (1, 12), (3, -9)],
]


def documented_examples() -> dict[str, Any]:
    """The names the doc's blocks marked ``<!-- tested -->`` define, run in order in one namespace."""
    text = (ROOT / "docs" / "extending.md").read_text()
    blocks = re.findall(r"<!-- tested -->\n```python\n(.*?)```", text, re.S)
    assert len(blocks) == 4, "docs/extending.md: expected the sink, DataFrameSink, operator and bad-record examples"
    names: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, "docs/extending.md", "exec"), names)
    return names


def write_input(folder: Path) -> None:
    folder.mkdir()
    for i, records in enumerate(FILES):
        path = folder / f"part-{i}.json"
        path.write_text("".join(json.dumps({"k": k, "v": v}) + "\n" for k, v in records))
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the order Spark takes them in (maxFilesPerTrigger 1)


def by_batch(rows: list[dict]) -> dict[int, list[tuple[int, int]]]:
    batches: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        batches[row["batch_id"]].append((row["k"], row["v"]))
    return {b: sorted(r) for b, r in batches.items()}


def plain_spark(spark, folder: Path) -> dict[int, list[tuple[int, int]]]:
    """Plain Spark's running maximum per key, each batch's update-mode output."""
    outputs: dict[int, list[tuple[int, int]]] = {}
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .where("k IS NOT NULL AND v IS NOT NULL")
        .groupBy("k")
        .agg(F.max("v").alias("v"))
        .writeStream.outputMode("update")
        .foreachBatch(lambda df, b: outputs.__setitem__(b, sorted((r["k"], r["v"]) for r in df.collect())))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return outputs


def test_the_documented_operator_and_sinks_give_plain_sparks_results_across_a_replay(spark, tmp_path):
    examples = documented_examples()
    folder, ckpt = tmp_path / "in", tmp_path / "ckpt"
    write_input(folder)
    calls: list[int] = []
    targets = [
        examples["SqliteSink"](str(tmp_path / "out.db")),
        DataFrameSink(examples["replace_partition"](str(tmp_path / "table"))),
        ParquetBatchSink(tmp_path / "batches"),
    ]

    def sink(batch_id: int, table: pa.Table) -> None:
        calls.append(batch_id)
        for target in targets:
            target(batch_id, table)

    def run() -> None:
        job = StatefulJob(
            examples["RunningMax"]("k", "v"),
            sink,
            str(ckpt),
            config=MisaConfig.from_mapping({"spark.misa.state.shards": "1"}),
            echo=None,
        )
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))
        try:
            job.start(spark, stream, {"availableNow": True}).awaitTermination()
        finally:
            job.close(spark)

    run()
    # as if the driver died after batch 2's sink and state, before Spark's commit (in Spark's local copy, and so
    # never mirrored to the checkpoint location either)
    for log_dir in (ckpt / "misa-local" / "spark-checkpoint", ckpt):
        for name in ("2", ".2.crc"):
            (log_dir / "commits" / name).unlink(missing_ok=True)
    run()  # recovery rolls the state back to version 1; Spark replays batch 2 from its offsets
    assert calls == [0, 1, 2, 2]
    expected = plain_spark(spark, folder)
    assert expected == {0: [(1, 10), (2, 5)], 1: [(1, 10), (3, -4)], 2: [(1, 12), (2, 8), (3, -4)]}
    with sqlite3.connect(tmp_path / "out.db") as db:
        sqlite_rows = [dict(zip(("batch_id", "k", "v"), r)) for r in db.execute("SELECT * FROM running_max")]
    assert by_batch(sqlite_rows) == expected
    table = spark.read.parquet(str(tmp_path / "table")).collect()
    assert by_batch([r.asDict() for r in table]) == expected
    batches = [{"batch_id": b, **row} for b, t in read_batches(tmp_path / "batches") for row in t.to_pylist()]
    assert by_batch(batches) == expected


def test_a_dataframe_sink_hands_the_batch_to_its_writer_as_a_dataframe(spark):
    seen = []
    sink = DataFrameSink(lambda df, batch_id: seen.append((batch_id, df.schema.simpleString(), df.count())), spark)
    sink(7, pa.table({"k": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    assert seen == [(7, "struct<k:bigint,name:string>", 2)]


def test_the_documented_bad_record_reading_quarantines_malformed_lines_and_counts_them(spark, tmp_path):
    """The doc's reader and quarantine with the doc's operator: malformed lines are counted and written aside,
    exactly as read, and the output is plain Spark's over the good lines."""
    examples = documented_examples()
    folder = tmp_path / "in"
    write_input(folder)
    bad = ['{"k": 1, "v": 1000', '{"k": "one", "v": 1}', '{"v": 5}']
    with (folder / "part-1.json").open("a") as f:
        f.write("".join(line + "\n" for line in bad))
    os.utime(folder / "part-1.json", (1_000_001, 1_000_001))
    outputs: dict[int, list[tuple[int, int]]] = {}
    job = StatefulJob(
        examples["RunningMax"]("k", "v"),
        lambda batch_id, table: outputs.__setitem__(batch_id, sorted((r["k"], r["v"]) for r in table.to_pylist())),
        str(tmp_path / "ckpt"),
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "1"}),
        bad_records=examples["quarantine"](str(tmp_path / "quarantine")),
        echo=None,
    )
    counts: dict[int, int | None] = {}
    job.add_listener(lambda report, progress: counts.__setitem__(report.batch_id, report.record.bad_records))
    try:
        stream = examples["parsed_lines"](spark, str(folder))
        job.start(spark, stream, {"availableNow": True}).awaitTermination()
    finally:
        job.close(spark)
    assert outputs == {0: [(1, 10), (2, 5)], 1: [(1, 10), (3, -4)], 2: [(1, 12), (2, 8), (3, -4)]}
    null_key = json.dumps({"k": None, "v": 99})  # k is required: a null key is a bad record too
    assert sorted(read_quarantine(tmp_path / "quarantine")) == sorted([null_key, *bad])
    assert counts == {0: 1, 1: 3, 2: 0}
