"""Bad input records: the rule, the per-batch quarantine files, and Cluster Monitoring with bad input."""

import os
from collections import Counter
from pathlib import Path

import pytest
from job_helpers import assert_same_results, metrics, run_in_process
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from jobs import cluster_monitoring
from jobs.gen.cm import generate_cm
from misa.io.quarantine import BAD_COLUMN, RAW_COLUMN, Quarantine, good_records, parse_json_lines, read_quarantine

SCHEMA = StructType(
    [
        StructField("time", LongType()),
        StructField("vid", LongType()),
        StructField("spd", IntegerType()),
        StructField("note", StringType()),
    ]
)
LINES = {  # line -> bad?
    '{"time": 1, "vid": 5, "spd": 10, "note": "ok"}': False,
    '{"time": 2, "vid": 6, "spd": 10, "extra": [1, 2]}': False,  # unknown fields are ignored; note is optional
    '{"time": 3, "vid": 7, "spd": 10, "note": "ü ∑"}': False,
    '{"time": 4, "vid": 8, "sp': True,  # truncated
    '{"time": 5, "spd": 10}': True,  # vid missing
    '{"time": 6, "vid": null, "spd": 10}': True,  # vid null
    '{"time": 7, "vid": 9, "spd": "x17"}': True,  # a number as a string
    '{"time": 8, "vid": 9, "spd": 2.5}': True,  # a fraction for an integer
    '{"time": 9, "vid": 9, "spd": 10, "note": 3}': False,  # a number where a string is due: Spark reads it as "3"
    '{"time": 99999999999999999999, "vid": 9, "spd": 1}': True,  # out of range
    "[1, 2]": True,
    "17": True,
}
REQUIRED = ("time", "vid", "spd")


@pytest.fixture
def lines_df(spark, tmp_path):
    path = tmp_path / "in.json"
    path.write_text("\n".join(LINES) + "\n\n  \n")  # blank lines are not records
    return spark.read.text(str(path))


def test_the_bad_record_rule(lines_df):
    parsed = parse_json_lines(lines_df, SCHEMA, REQUIRED)
    flags = {row[RAW_COLUMN]: row[BAD_COLUMN] for row in parsed.collect()}
    assert flags == LINES
    good = good_records(parsed)
    assert good.columns == SCHEMA.names and sorted(r["time"] for r in good.collect()) == [1, 2, 3, 9]


def split(quarantine: Quarantine, batch, batch_id: int):
    """What the runtime does with a batch: count records and bad ones, write the bad ones aside, keep the good."""
    counts = batch.agg(F.count(F.lit(1)).alias("records"), quarantine.bad_count().alias("bad")).first()
    quarantine.write_aside(batch, batch_id, counts["bad"])
    return quarantine.good(batch), counts["bad"], counts["records"]


def test_quarantine_writes_the_exact_lines_per_batch_and_a_replay_replaces_them(lines_df, tmp_path):
    parsed = parse_json_lines(lines_df, SCHEMA, REQUIRED)
    quarantine = Quarantine(f"file://{tmp_path / 'q'}")
    good, bad, records = split(quarantine, parsed, 3)
    expected = [line for line, is_bad in LINES.items() if is_bad]
    assert bad == len(expected) and good.count() == 4 and records == 4 + len(expected)
    assert Counter(read_quarantine(tmp_path / "q")) == Counter(expected)
    [text] = [p for p in (tmp_path / "q" / "batch_id=3").iterdir() if p.suffix == ".txt"]  # one attempt left
    assert text.read_bytes().decode().endswith("\n")
    replay = parsed.where(F.col(RAW_COLUMN).startswith('{"time": 5') | F.col(RAW_COLUMN).startswith('{"time": 6'))
    assert split(quarantine, replay, 3)[1] == 2  # a replay of batch 3 that saw fewer lines
    assert Counter(read_quarantine(tmp_path / "q")) == Counter(expected[1:3])
    assert split(quarantine, parsed.where(F.col(RAW_COLUMN).startswith('{"time": 1,')), 3)[1] == 0
    assert not (tmp_path / "q" / "batch_id=3").exists() and read_quarantine(tmp_path / "q") == []


def test_misuse_is_explained(lines_df, tmp_path):
    with pytest.raises(ValueError, match=r"required columns \['lane'\] are not in the input schema"):
        parse_json_lines(lines_df, SCHEMA, ["lane"])
    with pytest.raises(ValueError, match="read the input with misa.parse_json_lines"):
        Quarantine(tmp_path).good(lines_df)


BAD_CM_LINES = [
    '{"time": 12000000, "job_id": 6000000001, "event_type": 1, "scheduling',
    '{"time": 12000001}',
    '{"time": 12000002, "job_id": 6000000001, "event_type": 1, "scheduling_class": 1, "cpu_request": "x0.5"}',
]


@pytest.fixture(scope="module")
def cm_data(tmp_path_factory) -> Path:
    """CM input with bad lines inserted into the second file (its modification time kept)."""
    data = tmp_path_factory.mktemp("cm-bad-input")
    generate_cm(data, rate=150, seconds=48, seed=3, files_per_second=0.125, jobs=100, progress=False)
    target = sorted(data.glob("part-*.json"))[1]
    stat = target.stat()
    lines = target.read_text().splitlines()
    target.write_text("\n".join(lines[:5] + BAD_CM_LINES + lines[5:]) + "\n")
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return data


@pytest.mark.slow  # make test quarantines a job's bad input in test_linear_road.py and test_nexmark.py
def test_cluster_monitoring_quarantines_bad_input_and_equals_the_reference_over_good_records(spark, cm_data, tmp_path):
    expected = run_in_process(spark, cluster_monitoring, "cm2", "native", cm_data, tmp_path / "native")
    got = run_in_process(spark, cluster_monitoring, "cm2", "misa", cm_data, tmp_path / "misa")
    assert_same_results(got, expected)
    assert Counter(read_quarantine(tmp_path / "misa" / "ckpt" / "quarantine")) == Counter(BAD_CM_LINES)
    records = metrics(tmp_path / "misa")
    assert sum(r["bad_records"] for r in records) == len(BAD_CM_LINES)
    input_lines = sum(1 for f in cm_data.glob("*.json") for line in f.read_text().splitlines() if line.strip())
    assert sum(r["input_rows"] for r in records) == input_lines  # counted once, whatever jobs read the batch
