"""The crash soak's Kafka source: one broker for the soak, one topic per job, and Spark's batches on it.

A job's generated folder is written once into its topic (:func:`services.kafka_produce.produce_folder`, every line a
record, malformed ones too, spread over :data:`PARTITIONS` partitions); its runs read the topic from the earliest
offsets with ``maxOffsetsPerTrigger`` set so that the batches are about as many as on the files. The topic never
changes during the soak, so Spark cuts it into the same batches in every run, and after a crash it replans a batch
from the offsets it logged: a run's batches are the reference's when its offsets log ends each batch where the
reference's does (:func:`kafka_layout`).

Every run on Kafka also writes its output rows into a topic of its own (``--output-topic``, one transaction per
batch): what a ``read_committed`` consumer reads there must be the reference's rows, each batch once, whatever
kills the run went through (:meth:`SoakTopics.output_rows`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from pathlib import Path

from services.kafka_broker import KafkaBroker
from services.kafka_client import consume_all
from services.kafka_install import connector_jars
from services.kafka_produce import produce_folder
from verify.output_diff import canonical

PARTITIONS = 2
SOURCES = ("files", "kafka")  # the soak's sources, drawn per iteration

Layout = dict[int, tuple[str, ...]]


class SoakTopics:
    """The soak's broker (started on first use) and each job's topic and batch size."""

    def __init__(self) -> None:
        self._broker: KafkaBroker | None = None
        self._per_batch: dict[str, int] = {}

    def add(self, job: str, folder: Path, batches: int) -> int:
        """Write ``folder`` into ``job``'s topic, read later in about ``batches`` batches: the records written."""
        if self._broker is None:
            self._broker = KafkaBroker().start()
        written = produce_folder(self._broker.bootstrap, topic(job), folder, PARTITIONS, None, replace=True)
        self._per_batch[job] = math.ceil(written.records / max(1, batches))
        return written.records

    def arguments(self, job: str, run_dir: Path) -> list[str]:
        """The job's source options (instead of ``--input`` and ``--max-files-per-trigger``) and the run's output
        topic."""
        assert self._broker is not None, "SoakTopics.add() first"
        per_batch = str(self._per_batch[job])
        source = ["--kafka", self._broker.bootstrap, "--topic", topic(job), "--max-offsets-per-trigger", per_batch]
        return [*source, "--output-topic", output_topic(run_dir)]

    def output_rows(self, run_dir: Path) -> Counter:
        """The rows a ``read_committed`` consumer reads in the output topic of the runs under ``run_dir``."""
        assert self._broker is not None, "SoakTopics.add() first"
        records = consume_all(self._broker.bootstrap, output_topic(run_dir), read_committed=True)
        return Counter(tuple(canonical(v) for v in json.loads(r.value).values()) for r in records)

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.stop()
            self._broker = None


def topic(job: str) -> str:
    return f"soak-{job}"


def output_topic(run_dir: Path) -> str:
    """The output topic of the runs under ``run_dir`` (the same for each run of an iteration)."""
    return f"soak-out-{hashlib.sha256(str(run_dir).encode()).hexdigest()[:16]}"


def submit_options() -> list[str]:
    """spark-submit's options that put Spark's Kafka connector on the driver's and executors' class path."""
    return ["--jars", ",".join(map(str, connector_jars()))]


def kafka_layout(checkpoint: Path) -> Layout:
    """Batch id -> the distinct end offsets of its Kafka sources, for the batches that read records (as the files'
    layout keeps the batches that read files): the lines of Spark's offsets log after its version and metadata
    lines that are a topic's offsets per partition (not those of misa's own sources)."""
    folder = checkpoint / "offsets"
    entries = sorted(int(e.name) for e in folder.iterdir() if e.name.isdigit()) if folder.is_dir() else []
    found: Layout = {}
    previous: tuple[str, ...] = ()
    for batch in entries:
        lines = (folder / str(batch)).read_text().splitlines()[2:]
        offsets = [json.loads(line) for line in lines if line.startswith("{")]
        # distinct: a query that reads the topic twice (a self-join) logs its offsets once per read
        ends = tuple(sorted({json.dumps(o, sort_keys=True) for o in offsets if _is_topic_offsets(o)}))
        if ends != previous:
            found[batch] = ends
        previous = ends
    return found


def _is_topic_offsets(offset: object) -> bool:
    """Whether a source's offset is Kafka's: per topic, an offset per partition."""
    return isinstance(offset, dict) and bool(offset) and all(isinstance(v, dict) for v in offset.values())
