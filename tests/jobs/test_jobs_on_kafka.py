"""The jobs on Kafka (issue 62, item 2): a generator's folder written into a keyed topic of several partitions
(``misa kafka produce``), read by a job with ``--kafka --topic --max-offsets-per-trigger``, through misa and in
Spark's native mode batch by batch (each reads the same offsets in each batch)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import pytest
from cm_helpers import late_cm2_input
from job_helpers import job_args, results

from jobs import cluster_monitoring
from jobs.submit import job_arguments
from services.kafka_client import consume_all
from services.kafka_produce import produce_folder
from verify.output_diff import canonical, diff_rows, read_output, without_batch_ids


def on_kafka(args: list[str], bootstrap: str, topic: str, per_batch: int) -> list[str]:
    """A test run's command line (:func:`job_helpers.job_args`) reading the topic instead of the folder."""
    index = args.index("--input")
    args = args[:index] + args[index + 2 :]
    index = args.index("--max-files-per-trigger")
    args = args[:index] + args[index + 2 :]
    return [*args, "--kafka", bootstrap, "--topic", topic, "--max-offsets-per-trigger", str(per_batch)]


@pytest.mark.slow  # two CM2 runs (make run runs the same on its larger input and checks them equal)
def test_cm2_on_a_kafka_topic_gives_the_native_modes_rows_batch_by_batch(spark, kafka_broker, tmp_path: Path):
    data = late_cm2_input(tmp_path / "input", seed=11)
    written = produce_folder(kafka_broker, "cm2-test", data, partitions=3, key_field="job_id", replace=True)
    assert written.records == len(consume_all(kafka_broker, "cm2-test")) > 0
    runs = {}
    for mode in ("misa", "native"):
        args = on_kafka(job_args("cm2", mode, data, tmp_path / mode), kafka_broker, "cm2-test", 4000)
        cluster_monitoring.run(spark, cluster_monitoring.parse_args(args))
        runs[mode] = read_output(tmp_path / mode / "out")
    assert runs["native"].size > 0
    diff = diff_rows(runs["misa"].rows, runs["native"].rows)
    assert diff.ok, diff.describe(runs["native"].columns)
    assert results(cluster_monitoring, "cm2", tmp_path / "misa")


@pytest.mark.slow  # two CM2 runs; make test has the sink's own kill tests (tests/misa/io/test_kafka_sink.py)
def test_the_output_topic_holds_each_batchs_rows_once_for_a_committed_reader(spark, kafka_broker, tmp_path: Path):
    """``--output-topic``: the job's rows also go into a topic, a transaction per batch; a second run on the same
    checkpoint (every batch already committed) writes nothing again."""
    data = late_cm2_input(tmp_path / "input", seed=12)
    produce_folder(kafka_broker, "cm2-out-src", data, partitions=2, key_field="job_id", replace=True)
    args = on_kafka(job_args("cm2", "misa", data, tmp_path / "misa"), kafka_broker, "cm2-out-src", 4000)
    args += ["--output-topic", "cm2-out"]
    for _ in range(2):
        cluster_monitoring.run(spark, cluster_monitoring.parse_args(args))
    written = Counter()  # the Parquet rows, timestamps as the sink's JSON writes them
    for row, n in without_batch_ids(read_output(tmp_path / "misa" / "out").rows).items():
        written[tuple(v.isoformat() if hasattr(v, "isoformat") else v for v in row)] += n
    committed = Counter(
        tuple(canonical(v) for v in json.loads(r.value).values())
        for r in consume_all(kafka_broker, "cm2-out", read_committed=True)
    )
    assert sum(written.values()) > 0
    diff = diff_rows(committed, written)
    assert diff.ok, diff.describe()


def test_a_malformed_record_on_the_topic_is_quarantined_not_lost(kafka_broker, tmp_path: Path):
    folder = tmp_path / "input"
    folder.mkdir()
    (folder / "part-0.json").write_text('{"job_id": 1, "time": 5}\n{"job_id": 2, "ti\n')
    written = produce_folder(kafka_broker, "malformed-test", folder, partitions=2, key_field="job_id", replace=True)
    assert (written.records, written.malformed) == (2, 1)
    values = sorted(record.value for record in consume_all(kafka_broker, "malformed-test"))
    assert values == [b'{"job_id": 1, "time": 5}', b'{"job_id": 2, "ti']  # the job's quarantine gets it whole


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--kafka", "127.0.0.1:9092"], "--kafka needs --topic"),
        ([], "--input DIR, or --kafka BOOTSTRAP --topic TOPIC"),
        (["--input", "i", "--output-topic", "o"], "--output-topic needs --kafka"),
    ],
)
def test_a_job_needs_one_source(argv: list[str], message: str, capsys):
    parser = job_arguments("test", ("cm2",))
    with pytest.raises(SystemExit):
        parser.parse_args(["--query", "cm2", "--output", "o", "--checkpoint", "c", *argv])
    assert message in capsys.readouterr().err


def test_a_folder_and_a_topic_are_one_flag_apart():
    args = job_arguments("test", ("cm2",)).parse_args(
        ["--query", "cm2", "--output", "o", "--checkpoint", "c", "--kafka", "b:1", "--topic", "t"]
    )
    assert isinstance(args, argparse.Namespace) and (args.kafka, args.topic, args.starting_offsets) == (
        "b:1",
        "t",
        "earliest",
    )
