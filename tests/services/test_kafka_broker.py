"""The project's Kafka broker: a topic of three partitions written and read back with confluent-kafka, a
``read_committed`` read that skips an aborted transaction, ``misa kafka up|status|down``, and the clear errors when
the jars, Maven or Java are missing or the broker cannot start."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from misa.exceptions import CommandError
from services import kafka_command
from services.exceptions import KafkaBrokerError
from services.kafka_broker import KafkaBroker
from services.kafka_client import Record, admin, consume_all, create_topic, produce
from services.kafka_command import is_running
from services.kafka_install import BROKER_POM, STAMP, install_broker_jars, pom_hash

MISA = str(Path(sys.executable).parent / "misa")


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_records_produced_to_three_partitions_are_read_back(kafka_broker):
    topic = new_topic("events")
    create_topic(kafka_broker, topic, partitions=3)
    assert sorted(admin(kafka_broker).list_topics(topic, timeout=10).topics[topic].partitions) == [0, 1, 2]
    sent = [Record(f"k{i}", f"v{i}", 1_000 * (i + 1), i % 3) for i in range(30)]  # event times of 1970: kept
    sent += [Record(None, b"\x00no key", 99_000), Record("no value", None, 98_000, 2)]
    assert produce(kafka_broker, topic, sent) == 32

    read = consume_all(kafka_broker, topic)
    assert sorted((_bytes(r.key), _bytes(r.value), r.timestamp_ms) for r in read) == sorted(
        (_bytes(s.key), _bytes(s.value), s.timestamp_ms) for s in sent
    )
    placed = {(_bytes(r.key), r.partition) for r in read}
    assert all((_bytes(s.key), s.partition) in placed for s in sent if s.partition is not None)
    for partition in (0, 1, 2):  # each partition read whole, in order
        offsets = [r.offset for r in read if r.partition == partition]
        assert offsets == list(range(len(offsets)))
    assert consume_all(kafka_broker, topic, read_committed=True) == read  # no transactions: the same records


def test_read_committed_skips_an_aborted_transaction(kafka_broker):
    topic = new_topic("txn")
    create_topic(kafka_broker, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key="a", value="aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key="c", value="committed", partition=1)
    producer.commit_transaction(30)

    assert [r.value for r in consume_all(kafka_broker, topic, read_committed=True)] == [b"committed"]
    assert sorted(r.value for r in consume_all(kafka_broker, topic)) == [b"aborted", b"committed"]


@pytest.mark.slow  # a second broker of its own (make test starts one for the session)
def test_misa_kafka_up_status_down(tmp_path):
    state = tmp_path / "broker.json"
    up = subprocess.run([MISA, "kafka", "up", "--state", str(state)], capture_output=True, text=True, timeout=180)
    assert up.returncode == 0, up.stderr
    running = json.loads(state.read_text())
    try:
        assert up.stdout.strip() == running["bootstrap"]
        status = subprocess.run([MISA, "kafka", "status", "--state", str(state)], capture_output=True, text=True)
        assert status.returncode == 0 and running["bootstrap"] in status.stdout
        topic = new_topic("cli")
        create_topic(running["bootstrap"], topic)
        produce(running["bootstrap"], topic, [("k", "v", 1_000)])
        assert [(r.key, r.value) for r in consume_all(running["bootstrap"], topic)] == [(b"k", b"v")]
    finally:
        down = subprocess.run([MISA, "kafka", "down", "--state", str(state)], capture_output=True, text=True)
    assert down.returncode == 0 and "stopped the broker" in down.stdout, down.stdout + down.stderr
    assert not is_running(running) and not Path(running["dir"]).exists() and not state.exists()
    status = subprocess.run([MISA, "kafka", "status", "--state", str(state)], capture_output=True, text=True)
    assert status.returncode == 1 and "not running" in status.stdout


def test_a_missing_jar_folder_is_named(tmp_path):
    with pytest.raises(KafkaBrokerError, match=r"no Kafka broker jars in \S*nowhere: run `make kafka-jars`"):
        KafkaBroker(jars_dir=tmp_path / "nowhere").start()


def test_missing_maven_or_java_is_named_and_a_resolved_folder_needs_neither(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr("services.kafka_install.shutil.which", lambda name: None if name == "mvn" else "/usr/bin/java")
    with pytest.raises(KafkaBrokerError, match=r"Maven \(mvn\) was not found on PATH"):
        install_broker_jars(tmp_path / "jars")
    monkeypatch.setattr("services.kafka_install.shutil.which", lambda name: None)
    with pytest.raises(KafkaBrokerError, match=r"Java was not found .* Java 17 or newer"):
        install_broker_jars(tmp_path / "jars")
    resolved = tmp_path / "resolved"
    resolved.mkdir()
    (resolved / STAMP).write_text(pom_hash(BROKER_POM) + "\n")
    assert install_broker_jars(resolved) is False  # the cache: neither tool is asked for


def test_a_broker_that_cannot_start_says_why_and_leaves_no_folder(tmp_path, monkeypatch):
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "kafka_2.13-0.0.jar").write_bytes(b"")  # not a jar: the JVM finds no Kafka class
    (jars / STAMP).write_text("x\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(KafkaBrokerError, match=r"formatting the Kafka storage failed .*kafka\.tools\.StorageTool"):
        KafkaBroker(jars_dir=jars).start()
    assert [p.name for p in tmp_path.iterdir()] == ["jars"]


def _bytes(data: str | bytes | None) -> bytes:
    """``data`` as Kafka returns it, with b"<null>" for None (sortable among bytes)."""
    return data.encode() if isinstance(data, str) else b"<null>" if data is None else data


def test_misa_kafka_jars_prints_the_connector_for_spark_submit(capsys, monkeypatch):
    assert kafka_command.print_connector_jars(argparse.Namespace()) == 0
    jars = capsys.readouterr().out.strip().split(",")
    assert any("spark-sql-kafka-0-10" in Path(j).name for j in jars) and all(Path(j).is_file() for j in jars)
    monkeypatch.setattr(kafka_command, "connector_jars", lambda: [])
    with pytest.raises(CommandError, match="make kafka-jars"):
        kafka_command.print_connector_jars(argparse.Namespace())
