"""``misa bench kafka``: misa, Spark's micro-batch and Spark 4.3's real-time mode on a live Kafka topic (issue 62, 5).

One producer (its own process, confluent-kafka) writes records into a fresh topic at a fixed rate for ``--seconds``.
Record ``n`` is the JSON ``{"id", "user", "t", "p", "side"}``: ``t`` its event time, ``BASE_MS + n * 1000 / rate``
(the same for every run at a rate, so that every engine's run gets the same rows), ``p`` the wall-clock time the
producer handed it over (epoch ms), also the record's Kafka timestamp; ``user`` the key (``--keys`` users); every
fifth record repeats the record before it (same ``id``, ``user``, ``t``: a duplicate for ``dedup``).

Engines, one after the other on the same topic layout, in one Spark session (``local[4]``: real-time mode needs a
task slot per source partition plus one per shuffle partition; ``spark.sql.shuffle.partitions`` 2):

* ``misa``: :func:`misa.from_query`, its sink a callable;
* ``spark``: Spark's micro-batch with its tuned RocksDB store (:func:`jobs.submit.native_state_store_conf`),
  ``foreachBatch`` collecting each batch as Arrow;
* ``realtime``: Spark's real-time mode (``trigger(realTime="5 seconds")``) on the same tuned store, into Spark's
  Kafka sink (an output topic; a row's JSON value).

Both micro-batch engines try each of ``--triggers`` (processing-time, shortest first) and keep the first run that
sustains the rate (below); real-time mode has no such choice.

**Latency** (the same definition for every engine): an output row's latency is its sink time minus the newest
produce time ``p`` of the records it includes (an aggregate's ``max(p)``, a join row's larger ``p``, a
deduplicated row's own ``p``). Sink time: misa, the moment its sink callable gets the batch's rows; Spark's
micro-batch, the moment ``foreachBatch`` has them on the driver as Arrow; real-time mode, the Kafka timestamp
(``CreateTime``) Spark's Kafka producer gives the output record when the executor sends it. Rows of records
produced in the first ``--warmup`` seconds are left out. **Sustained**: the engine's lag at time x (x minus the
newest ``p`` its sink has seen by x, sampled every 250 ms) has a median over the last quarter of the producing
time no more than 1 s (or two triggers) above its median over the second quarter, and the engine drained (its sink
saw the last record's ``p``, or got nothing new for ``QUIET_S``) within ``DRAIN_TIMEOUT_S`` of the producer's end.
**CPU per record**: the CPU time (/proc: user + system, and that of reaped children) of this process (the driver's
Python, misa's state phase, the sinks) and every process under it (Spark's JVM, Python workers), the producer and
the broker left out, from just after the query started to the end of the drain, over the records produced.

**Output check**: once every engine of a query and rate drained, their final results are compared through
:func:`bench.same_output.compare_batches`: per key the last row (the row of the largest count: counts only
grow) for update output, every row for append output, without the ``p`` columns (produce times differ between
runs). misa against Spark's micro-batch and real-time mode against Spark's micro-batch; a ratio is printed only when
both sides' outputs are equal.

Queries (watermark 10 s on ``t``): ``tumbling`` (10 s windows, count per user), ``sliding`` (10 s every 2 s),
``dedup`` (``dropDuplicates(["id", "event_time"])``): update output, all three engines. ``session`` (session
windows, 2 s gap, append) and ``join`` (record 2k, side 0, joined with record 2k + 1, side 1, in the 5 s after it:
``id div 2`` the key; append): misa
and Spark's micro-batch only; real-time mode's refusal is captured by starting it (:func:`realtime_refusals`, also
for a tumbling window in append output and ``transformWithStateInPandas``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import median
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.same_output import Check, compare_batches
from services.kafka_client import create_topic

BASE_MS = 1_700_000_000_000
QUERIES = ("tumbling", "sliding", "dedup", "session", "join")
REALTIME_QUERIES = ("tumbling", "sliding", "dedup")
OUTPUT_MODES = {"tumbling": "update", "sliding": "update", "dedup": "update", "session": "append", "join": "append"}
P_COLUMNS = {"join": ("lp", "rp")}  # the produce-time columns of a query's output (default: newest_p)
KEYS = {"tumbling": ("window_start", "window_end", "user"), "sliding": ("window_start", "window_end", "user")}
ENGINES = ("misa", "spark", "realtime")
SCHEMA = "id bigint, user string, t bigint, p bigint, side int"
QUIET_S = 6.0
DRAIN_TIMEOUT_S = 30.0
REALTIME_CHECKPOINT = "5 seconds"


# ---------------------------------------------------------------------------------------------------- producer


def record(n: int, rate: float, keys: int, produced_ms: int) -> dict[str, Any]:
    """Record ``n`` of a run at ``rate`` (every fifth repeats the one before it, but for its produce time)."""
    source = n - 1 if n % 5 == 4 else n
    return {
        "id": source,
        "user": f"u{(source * 7919) % keys}",
        "t": BASE_MS + int(source * 1000 / rate),
        "p": produced_ms,
        "side": source % 2,
    }


def produce_at_rate(bootstrap: str, topic: str, rate: float, seconds: float, keys: int, result: Any) -> None:
    """Produce ``rate * seconds`` records into ``topic`` paced by the wall clock (in 5 ms steps), each stamped with
    its produce time; put ``(records, first_ms, last_ms, behind_ms)`` on ``result`` (``behind_ms``: how late the
    producer itself ran at its worst)."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 1, "queue.buffering.max.messages": 1_000_000, "log_level": 4}
    )
    total = int(rate * seconds)
    started = time.time()
    n = behind = 0
    first = last = 0
    while n < total:
        now = time.time()
        due = min(total, int((now - started) * rate) + 1)
        behind = max(behind, now - (started + n / rate))
        while n < due:
            stamp = int(time.time() * 1000)
            value = record(n, rate, keys, stamp)
            while True:
                try:
                    producer.produce(topic, key=value["user"], value=json.dumps(value), timestamp=stamp)
                    break
                except BufferError:  # the broker is behind: wait for it (the producer then runs behind its schedule)
                    producer.poll(0.01)
            first = first or stamp
            last = stamp
            n += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(30)
    result.put((n, first, last, int(behind * 1000)))


# ---------------------------------------------------------------------------------------------------- CPU


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(ppid, own CPU s, reaped children's CPU s) of a process from /proc, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def process_cpu(excluded: set[int]) -> float:
    """CPU seconds of this process (its own: the producer, once reaped, would land in its children's) and of every
    process under it (their own and their reaped children's), the subtrees of ``excluded`` left out."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    me = os.getpid()
    total = stats[me][1] if me in stats else 0.0
    todo = list(children.get(me, []))
    while todo:
        pid = todo.pop()
        if pid in excluded:
            continue
        total += stats[pid][1] + stats[pid][2]
        todo.extend(children.get(pid, []))
    return total


# ---------------------------------------------------------------------------------------------------- queries


def events(spark: Any, bootstrap: str, topic: str) -> Any:
    """The topic's records decoded, event time ``t`` with a 10 s watermark."""
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    decoded = raw.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("v")).select("v.*")
    return decoded.withColumn("event_time", F.timestamp_millis("t")).withWatermark("event_time", "10 seconds")


def query(stream: Any, name: str) -> Any:
    from pyspark.sql import functions as F

    if name in ("tumbling", "sliding", "tumbling_append"):
        window = F.window("event_time", "10 seconds", "2 seconds" if name == "sliding" else None)
        return stream.groupBy(window, "user").agg(F.count("*").alias("n"), F.max("p").alias("newest_p"))
    if name in ("session", "session_update"):
        return stream.groupBy(F.session_window("event_time", "2 seconds"), "user").agg(
            F.count("*").alias("n"), F.max("p").alias("newest_p")
        )
    if name == "dedup":
        return stream.dropDuplicates(["id", "event_time"]).select("id", "user", "t", F.col("p").alias("newest_p"))
    if name == "join":
        pair = F.expr("id div 2")  # record 2k (side 0) meets record 2k + 1 (side 1): one match each, at any rate
        left = stream.where("side = 0").select(
            pair.alias("lk"), F.col("event_time").alias("lt"), F.col("id").alias("lid"), F.col("p").alias("lp")
        )
        right = stream.where("side = 1").select(
            pair.alias("rk"), F.col("event_time").alias("rt"), F.col("id").alias("rid"), F.col("p").alias("rp")
        )
        return left.join(right, F.expr("lk = rk AND rt BETWEEN lt AND lt + interval 5 seconds"))
    raise ValueError(f"unknown query {name!r}")


def _kafka_value(df: Any) -> Any:
    """A query's rows as Kafka records for real-time mode's sink: JSON values, window bounds as epoch ms."""
    from pyspark.sql import functions as F

    columns = []
    for name in df.columns:
        if name in ("window", "session_window"):
            columns += [
                F.unix_millis(F.col(f"{name}.start")).alias("window_start"),
                F.unix_millis(F.col(f"{name}.end")).alias("window_end"),
            ]
        elif name in ("lt", "rt"):
            columns.append(F.unix_millis(F.col(name)).alias(name))
        else:
            columns.append(F.col(name))
    return df.select(F.to_json(F.struct(*columns)).alias("value"))


# ---------------------------------------------------------------------------------------------------- a run


@dataclass
class Sink:
    """What an engine's sink got: (sink time ms, rows) per delivery, and the newest ``p`` seen so far."""

    p_columns: tuple[str, ...]
    deliveries: list[tuple[float, pa.Table]] = field(default_factory=list)
    newest: int = 0
    last_delivery: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, at_ms: float, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        newest = max(pc.max(rows[c]).as_py() or 0 for c in self.p_columns)
        with self.lock:
            self.deliveries.append((at_ms, rows))
            self.newest = max(self.newest, newest)
            self.last_delivery = time.time()

    def __call__(self, _batch_id: int, rows: pa.Table) -> None:  # misa's sink, foreachBatch's
        self.add(time.time() * 1000, rows)


@dataclass
class Run:
    query: str
    engine: str
    rate: float
    trigger: str
    records: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    lag_mid_ms: float | None = None
    lag_end_ms: float | None = None
    drained: bool = False
    sustained: bool = False
    cpu_s: float = 0.0
    producer_behind_ms: int = 0
    error: str = ""
    final: pa.Table | None = None
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def cpu_us_per_record(self) -> float | None:
        return self.cpu_s / self.records * 1e6 if self.records else None

    def row(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("final",)}
        return out | {"cpu_us_per_record": self.cpu_us_per_record}


def normalized(table: pa.Table) -> pa.Table:
    """An output table with window structs as ``window_start``/``window_end`` epoch ms and times as epoch ms."""
    columns: dict[str, pa.Array] = {}
    for name in table.column_names:
        column = table[name]
        if pa.types.is_struct(column.type):
            for part, label in (("start", "window_start"), ("end", "window_end")):
                columns[label] = _ms(pc.struct_field(column, part))
        elif pa.types.is_timestamp(column.type):
            columns[name] = _ms(column)
        else:
            columns[name] = column
    return pa.table(columns)


def _ms(column: Any) -> Any:
    return pc.cast(pc.cast(column, pa.timestamp("ms", "UTC")), pa.int64())


def final_rows(deliveries: list[tuple[float, pa.Table]], name: str) -> pa.Table | None:
    """The run's final result without produce times: per key the row of the largest count (update aggregations),
    else every row; columns sorted by name."""
    tables = [normalized(t) for _, t in deliveries]
    if not tables:
        return None
    rows = pa.concat_tables(tables, promote_options="permissive")
    rows = rows.drop_columns([c for c in rows.column_names if c in ("newest_p", "lp", "rp")])
    if name in KEYS:
        rows = rows.group_by(list(KEYS[name])).aggregate([("n", "max")]).rename_columns([*KEYS[name], "n"])
    rows = rows.select(sorted(rows.column_names))
    return rows.cast(pa.schema([f.with_type(_plain(f.type)) for f in rows.schema]))


def _plain(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_integer(data_type):
        return pa.int64()
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return pa.string()
    return data_type


def latencies(deliveries: list[tuple[float, pa.Table]], p_columns: tuple[str, ...], from_ms: int) -> np.ndarray:
    """Each output row's sink time minus its newest produce time, for rows whose newest is at or after ``from_ms``."""
    out = []
    for at, rows in deliveries:
        newest = np.max(np.stack([rows[c].to_numpy(zero_copy_only=False) for c in p_columns]), axis=0)
        kept = newest[newest >= from_ms]
        out.append(at - kept)
    return np.concatenate(out) if out else np.array([])


def lag_series(deliveries: list[tuple[float, pa.Table]], p_columns: tuple[str, ...], start: int, end: int) -> list:
    """(x, lag ms) every 250 ms over [start, end]: x minus the newest ``p`` the sink had seen by x."""
    events = sorted((at, max(pc.max(t[c]).as_py() or 0 for c in p_columns)) for at, t in deliveries)
    out, newest, i = [], 0, 0
    for x in range(start, end + 1, 250):
        while i < len(events) and events[i][0] <= x:
            newest = max(newest, events[i][1])
            i += 1
        out.append((x, x - newest if newest else x - start))
    return out


def judge(run: Run, sink: Sink, first_ms: int, last_ms: int, warmup_s: float, trigger_s: float) -> None:
    """The run's latency percentiles, lag in the middle and at the end, and whether it sustained the rate."""
    from_ms = first_ms + int(warmup_s * 1000)
    values = latencies(sink.deliveries, sink.p_columns, from_ms)
    if values.size:
        run.p50_ms, run.p99_ms = float(np.percentile(values, 50)), float(np.percentile(values, 99))
    span = last_ms - first_ms
    series = lag_series(sink.deliveries, sink.p_columns, first_ms, last_ms)
    mid = [lag for x, lag in series if first_ms + span / 4 <= x < first_ms + span / 2]
    end = [lag for x, lag in series if x >= first_ms + 3 * span / 4]
    run.lag_mid_ms = float(median(mid)) if mid else None
    run.lag_end_ms = float(median(end)) if end else None
    allowance = max(1000.0, 2000 * trigger_s)
    run.sustained = bool(run.drained and mid and end and run.lag_end_ms <= run.lag_mid_ms + allowance)


class Bench:
    """The runs of one session and broker."""

    def __init__(self, spark: Any, bootstrap: str, work: Path, args: argparse.Namespace, excluded: set[int]):
        self.spark, self.bootstrap, self.work, self.args, self.excluded = spark, bootstrap, work, args, excluded

    def run(self, name: str, engine: str, rate: float, trigger_s: float) -> Run:
        args = self.args
        tag = f"{name}-{engine}-{int(rate)}-{uuid.uuid4().hex[:6]}"
        topic = f"in-{tag}"
        create_topic(self.bootstrap, topic, partitions=args.partitions)
        trigger = "realTime " + REALTIME_CHECKPOINT if engine == "realtime" else f"{trigger_s:g} s"
        result = Run(name, engine, rate, trigger)
        sink = Sink(P_COLUMNS.get(name, ("newest_p",)))
        stream = query(events(self.spark, self.bootstrap, topic), name)
        run_dir = self.work / tag
        started = self._start(engine, name, stream, sink, run_dir, trigger_s)
        if isinstance(started, str):
            result.error = started
            return result
        streaming, stop, follow = started
        try:
            cpu_before = process_cpu(self.excluded)
            context = multiprocessing.get_context("spawn")
            answer = context.Queue()
            producer = context.Process(
                target=produce_at_rate, args=(self.bootstrap, topic, rate, args.seconds, args.keys, answer)
            )
            producer.start()
            self.excluded.add(producer.pid)
            records, first_ms, last_ms, behind = answer.get(timeout=args.seconds + 120)
            producer.join()
            self.excluded.discard(producer.pid)
            result.records, result.producer_behind_ms = records, behind
            result.drained = self._drain(sink, last_ms, streaming)
            result.cpu_s = process_cpu(self.excluded) - cpu_before
            if streaming.exception() is not None:
                result.error = str(streaming.exception()).splitlines()[0][:300]
        finally:
            stop()
        if follow is not None:
            follow()  # real-time mode's output topic, read whole once the query stopped
        judge(result, sink, first_ms, last_ms, args.warmup, trigger_s)
        result.final = final_rows(sink.deliveries, name)
        result.phases = _phases(run_dir / "metrics.jsonl") if engine == "misa" else {}
        return result

    def _drain(self, sink: Sink, last_ms: int, streaming: Any) -> bool:
        """Wait until the sink saw the last record's ``p``, or got nothing new for QUIET_S; False after the timeout."""
        ended = time.time()
        while time.time() - ended < DRAIN_TIMEOUT_S:
            if not streaming.isActive:
                return False
            if sink.newest >= last_ms:
                return True
            if time.time() - max(sink.last_delivery, ended) > QUIET_S:
                return True
            time.sleep(0.1)
        return False

    def _start(self, engine: str, name: str, stream: Any, sink: Sink, run_dir: Path, trigger_s: float):
        """Start the engine's query; (query, stop, follow) or the text of the error that refused it."""
        from jobs.submit import native_state_store_conf
        from misa import MisaConfig, from_query

        mode = OUTPUT_MODES[name]
        try:
            if engine == "misa":
                job = from_query(
                    stream,
                    sink,
                    str(run_dir / "ckpt"),
                    output_mode=mode,
                    config=MisaConfig.from_session(self.spark),
                    echo=None,
                    metrics_path=str(run_dir / "metrics.jsonl"),
                )
                streaming = job.start({"processingTime": f"{trigger_s:g} seconds"})
                _wait_first_batch(streaming)
                return streaming, job.close, None
            with _session_conf(self.spark, native_state_store_conf("native", MisaConfig())):
                if engine == "spark":
                    streaming = (
                        stream.writeStream.outputMode(mode)
                        .foreachBatch(lambda df, batch_id: sink(batch_id, df.toArrow()))
                        .option("checkpointLocation", str(run_dir / "ckpt"))
                        .trigger(processingTime=f"{trigger_s:g} seconds")
                        .start()
                    )
                    _wait_first_batch(streaming)
                    return streaming, streaming.stop, None
                out_topic = f"out-{run_dir.name}"
                create_topic(self.bootstrap, out_topic, partitions=1)
                streaming = realtime_start(_kafka_value(stream), self.bootstrap, out_topic, run_dir / "ckpt", mode)
                reader = OutputReader(self.bootstrap, out_topic, sink)
                reader.start()
                time.sleep(3)  # its tasks scheduled and polling before the producer starts
                if streaming.exception() is not None:
                    raise RuntimeError(str(streaming.exception()))

                def stop() -> None:
                    streaming.stop()

                return streaming, stop, reader.finish
        except Exception as exc:  # noqa: BLE001 - a refusal at start: its message is the result
            return _message(exc)


def realtime_start(df: Any, bootstrap: str, topic: str, checkpoint: Path, mode: str) -> Any:
    return (
        df.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", str(checkpoint))
        .outputMode(mode)
        .trigger(realTime=REALTIME_CHECKPOINT)
        .start()
    )


class OutputReader(threading.Thread):
    """Real-time mode's output topic read as it is written: each record's value (a JSON row) at its Kafka
    timestamp, the sink time; :meth:`finish` reads to the end and stops."""

    def __init__(self, bootstrap: str, topic: str, sink: Sink):
        super().__init__(daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False}
        )
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.sink, self.stopping = sink, threading.Event()

    def run(self) -> None:
        idle_since = None
        while True:
            messages = self.consumer.consume(1000, 0.2)
            good = [m for m in messages if m.error() is None]
            if good:
                idle_since = None
                by_time: dict[int, list[dict]] = {}
                for m in good:
                    by_time.setdefault(m.timestamp()[1], []).append(json.loads(m.value()))
                for at, rows in sorted(by_time.items()):
                    self.sink.add(float(at), pa.Table.from_pylist(rows))
            elif self.stopping.is_set():
                idle_since = idle_since or time.time()
                if time.time() - idle_since > 2:
                    break

    def finish(self) -> None:
        self.stopping.set()
        self.join(60)
        self.consumer.close()


def _wait_first_batch(streaming: Any, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while streaming.lastProgress is None and time.time() < deadline:
        if streaming.exception() is not None:
            raise RuntimeError(str(streaming.exception()))
        time.sleep(0.2)


class _session_conf:
    """Set session settings for a block, then restore them."""

    def __init__(self, spark: Any, conf: dict[str, str]):
        self.spark, self.conf = spark, conf

    def __enter__(self) -> None:
        self.previous = {key: self.spark.conf.get(key, None) for key in self.conf}
        for key, value in self.conf.items():
            self.spark.conf.set(key, value)

    def __exit__(self, *_: object) -> None:
        for key, value in self.previous.items():
            if value is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, value)


def _message(exc: BaseException) -> str:
    """An exception's message without its JVM stack: the first lines up to the first ``at``/``JVM stacktrace``."""
    lines = []
    for line in str(exc).splitlines():
        if line.strip().startswith(("at ", "JVM stacktrace")) or len(lines) >= 6:
            break
        lines.append(line.strip())
    return " ".join(line for line in lines if line)


def _phases(metrics: Path) -> dict[str, float]:
    """misa's mean per-batch phases (s) of batches with input, and its mean batch time and input rows."""
    if not metrics.exists():
        return {}
    from misa.obs.report import load_metrics

    records = [r for r in load_metrics(metrics)[0] if r.get("input_rows")]
    if not records:
        return {}
    out = {"batches": float(len(records)), "input_rows": float(np.mean([r["input_rows"] for r in records]))}
    out["batch_s"] = float(np.mean([r.get("batch_s", 0.0) for r in records]))
    for key in records[0].get("phases", {}):
        out[key] = float(np.mean([r["phases"].get(key, 0.0) for r in records]))
    return out


# ---------------------------------------------------------------------------------------------------- refusals


def _processor():
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Counter(StatefulProcessor):
        def init(self, handle):
            self.count = handle.getValueState("count", "n long")

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
            n = (self.count.get()[0] if self.count.exists() else 0) + sum(len(r) for r in rows)
            self.count.update((n,))
            yield pd.DataFrame({"user": [key[0]], "n": [n]})

        def close(self) -> None:
            pass

    return Counter()


def realtime_refusals(spark: Any, bootstrap: str, work: Path, partitions: int) -> dict[str, str]:
    """Real-time mode started on each query it is not documented to run, over a topic with records in it: its
    message at start, or once started within ``PROBE_S`` (the query's exception); "started (not refused)" and the
    rows it wrote if it ran. Last, whether a ``foreach`` sink runs in real-time mode (a tumbling window)."""
    from pyspark.sql import functions as F

    from services.kafka_client import consume_all, produce

    topic = f"refusals-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=partitions)
    now = int(time.time() * 1000)
    produce(bootstrap, topic, [(r["user"], json.dumps(r), now) for r in (record(n, 10, 5, now) for n in range(50))])
    stream = events(spark, bootstrap, topic)
    cases: dict[str, tuple[Callable[[], Any], str]] = {
        "session (update)": (lambda: query(stream, "session"), "update"),
        "session (append)": (lambda: query(stream, "session"), "append"),
        "join (append)": (lambda: query(stream, "join"), "append"),
        "tumbling (append)": (lambda: query(stream, "tumbling_append"), "append"),
        "transformWithStateInPandas (update)": (
            lambda: stream.groupBy("user").transformWithStateInPandas(
                _processor(), "user string, n long", "Update", "None"
            ),
            "update",
        ),
    }
    out = {}
    for label, (build, mode) in cases.items():
        out_topic = f"{topic}-out-{len(out)}"
        try:
            df = build()
            if "window" in df.columns or "session_window" in df.columns or "lt" in df.columns:
                df = _kafka_value(df)
            else:
                df = df.select(F.to_json(F.struct("*")).alias("value"))
            create_topic(bootstrap, out_topic, partitions=1)
            running = realtime_start(df, bootstrap, out_topic, work / f"refusal-{uuid.uuid4().hex[:6]}", mode)
            deadline = time.time() + PROBE_S
            while running.isActive and running.exception() is None and time.time() < deadline:
                time.sleep(0.5)
            error = running.exception()
            running.stop()
            if error is not None:
                out[label] = _message(error)
            else:
                rows = len(consume_all(bootstrap, out_topic))
                out[label] = f"started (not refused); {rows} rows written in {PROBE_S:g} s from 50 records"
        except Exception as exc:  # noqa: BLE001 - the refusal is the result
            out[label] = _message(exc)
    out["foreach sink (tumbling, update)"] = _foreach_probe(query(stream, "tumbling"), work)
    return out


PROBE_S = 15.0


class _RowFiles:
    """A ForeachWriter appending each row's JSON to a file per partition and epoch under a folder."""

    def __init__(self, folder: str):
        self.folder = folder

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.file = open(os.path.join(self.folder, f"{partition_id}-{epoch_id}-{uuid.uuid4().hex}.jsonl"), "a")  # noqa: SIM115
        return True

    def process(self, row: Any) -> None:
        self.file.write(json.dumps(row.asDict(recursive=True), default=str) + "\n")
        self.file.flush()

    def close(self, error: BaseException | None) -> None:
        self.file.close()


def _foreach_probe(df: Any, work: Path) -> str:
    folder = work / f"foreach-{uuid.uuid4().hex[:6]}"
    folder.mkdir(parents=True)
    try:
        running = (
            df.writeStream.foreach(_RowFiles(str(folder)))
            .option("checkpointLocation", str(folder / "_ckpt"))
            .outputMode("update")
            .trigger(realTime=REALTIME_CHECKPOINT)
            .start()
        )
        started = time.time()
        while running.isActive and running.exception() is None and time.time() < started + FOREACH_PROBE_S:
            if _rows(folder) >= 50:
                break
            time.sleep(0.5)
        waited = time.time() - started
        error = running.exception()
        running.stop()
    except Exception as exc:  # noqa: BLE001 - the refusal is the result
        return _message(exc)
    if error is not None:
        return _message(error)
    return f"runs: {_rows(folder)} rows written by the writer in {waited:.0f} s from 50 records"


FOREACH_PROBE_S = 60.0


def _rows(folder: Path) -> int:
    return sum(len(f.read_text().splitlines()) for f in folder.glob("*.jsonl"))


# ---------------------------------------------------------------------------------------------------- command


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "kafka",
        help="misa, Spark's micro-batch and Spark's real-time mode on a live Kafka topic at fixed rates: end-to-end "
        "latency p50/p99 per record, the highest sustained rate and CPU per record, outputs checked first",
    )
    p.add_argument("--queries", default=",".join(QUERIES), help=",".join(QUERIES))
    p.add_argument("--engines", default=",".join(ENGINES), help=",".join(ENGINES))
    p.add_argument("--rates", default="500,2000,8000", help="records per second, comma-separated")
    p.add_argument("--seconds", type=float, default=30.0, help="producing time per run")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of records left out of the latencies")
    p.add_argument("--triggers", default="0,0.5,1", help="processing-time triggers (s) tried, shortest first")
    p.add_argument("--keys", type=int, default=1000, help="users")
    p.add_argument("--partitions", type=int, default=2, help="the input topic's partitions")
    p.add_argument("--bootstrap", default=None, help="a running broker (default: the project's, started here)")
    p.add_argument("--work", type=Path, default=Path("bench-out/kafka"))
    p.add_argument("--no-refusals", action="store_true", help="do not start real-time mode on the queries it refuses")
    p.add_argument("--smoke", action="store_true", help="seconds-long runs at tiny rates (a check, no measurement)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    if args.smoke:
        args.rates, args.seconds, args.warmup, args.triggers = "20,40", 6.0, 1.0, "0"
    import sys

    from pyspark.sql import SparkSession

    from services.kafka_broker import KafkaBroker
    from services.kafka_install import connector_jars

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    slots = args.partitions + 2
    spark = (
        SparkSession.builder.master(f"local[{slots}]")
        .appName("misa-bench-kafka")
        .config("spark.jars", ",".join(connector_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    if args.bootstrap:
        return bench(spark, args.bootstrap, args, set())
    with KafkaBroker() as broker:
        return bench(spark, broker.bootstrap, args, {broker._process.pid} if broker._process is not None else set())


def bench(spark: Any, bootstrap: str, args: argparse.Namespace, excluded: set[int]) -> int:
    """Every query, rate and engine; the tables printed and written to WORK/kafka.md (rows in kafka.jsonl)."""
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    queries = [q for q in args.queries.split(",") if q]
    engines = [e for e in args.engines.split(",") if e]
    rates = [float(r) for r in str(args.rates).split(",")]
    triggers = [float(t) for t in str(args.triggers).split(",")]
    runner = Bench(spark, bootstrap, args.work, args, excluded)
    load = [os.getloadavg()[0]]
    probe = "realtime" in engines and not getattr(args, "no_refusals", False)
    refusals = realtime_refusals(spark, bootstrap, args.work, args.partitions) if probe else {}
    for label, text in refusals.items():
        print(f"real-time mode, {label}: {text}", flush=True)
    runs: list[Run] = []
    checks: dict[tuple[str, float, str], Check] = {}
    for name in queries:
        for rate in rates:
            by_engine: dict[str, Run] = {}
            for engine in engines:
                if engine == "realtime" and name not in REALTIME_QUERIES:
                    continue
                for trigger_s in [0.0] if engine == "realtime" else triggers:
                    load.append(os.getloadavg()[0])
                    run = runner.run(name, engine, rate, trigger_s)
                    print(_line(run), flush=True)
                    if run.sustained or run.error:
                        break
                by_engine[engine] = run
                runs.append(run)
                with (args.work / "kafka.jsonl").open("a") as out:
                    out.write(json.dumps(run.row() | {"load_1m": load[-1]}, default=str) + "\n")
            base = by_engine.get("spark")
            for other in ("misa", "realtime"):
                if other not in by_engine or base is None:
                    continue
                if not (by_engine[other].drained and base.drained):
                    undrained = " and ".join(r.engine for r in (by_engine[other], base) if not r.drained)
                    print(f"{name} at {rate:g}/s, {other} vs spark: not checked: {undrained} did not drain", flush=True)
                    continue
                checks[name, rate, other] = check(by_engine[other], base)
                print(f"{name} at {rate:g}/s, {other} vs spark: {checks[name, rate, other].line()}", flush=True)
    load.append(os.getloadavg()[0])
    text = report(runs, checks, refusals, load)
    (args.work / "kafka.md").write_text(text + "\n")
    print("\n" + text)
    return 0


def check(run: Run, base: Run) -> Check:
    """``run``'s final result against Spark's micro-batch's (no rows on either side: an empty check)."""
    got = {0: run.final} if run.final is not None else {}
    expected = {0: base.final} if base.final is not None else {}
    result = compare_batches(got, expected)
    how = "the last row per key after the drain" if run.query in KEYS else "every row after the drain"
    return replace(result, how=how)


def _line(run: Run) -> str:
    if run.error and not run.records:
        return f"{run.query} {run.engine} {run.rate:g}/s: refused: {run.error}"
    return (
        f"{run.query} {run.engine} {run.rate:g}/s trigger {run.trigger}: {run.records} records, latency p50 "
        f"{_fmt(run.p50_ms)} p99 {_fmt(run.p99_ms)} ms, lag mid {_fmt(run.lag_mid_ms)} end {_fmt(run.lag_end_ms)} ms, "
        f"{'sustained' if run.sustained else 'NOT sustained'}{'' if run.drained else ' (not drained)'}, "
        f"CPU {run.cpu_us_per_record or 0:.0f} us/record{'; error: ' + run.error if run.error else ''}"
    )


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report(runs: list[Run], checks: dict, refusals: dict[str, str], load: list[float]) -> str:
    """The tables: per query, rate and engine; the highest sustained rate; misa's phases; real-time mode's refusals."""
    lines = [
        f"1-minute load average during the runs: {min(load):.1f} to {max(load):.1f}",
        "",
        "| query | rate (/s) | engine | trigger | records | latency p50 (ms) | p99 (ms) | lag mid / end (ms) "
        "| sustained | CPU (us/record) | output vs Spark micro-batch | p50 / Spark's |",
        "|---|---:|---|---|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    spark_runs = {(r.query, r.rate): r for r in runs if r.engine == "spark"}
    for r in runs:
        c = checks.get((r.query, r.rate, r.engine))
        base = spark_runs.get((r.query, r.rate))
        same = "-" if c is None else ("equal" if c.same else "outputs differ")
        if c is None and r.engine != "spark" and not (r.drained and getattr(base, "drained", False)):
            same = "not checked (not drained)"
        ratio = "-"
        if c is not None and base is not None and r.p50_ms and base.p50_ms:
            ratio = f"{r.p50_ms / base.p50_ms:.2f}" if c.same else "no ratio (outputs differ)"
        lines.append(
            f"| {r.query} | {r.rate:g} | {r.engine} | {r.trigger} | {r.records:,} | {_fmt(r.p50_ms)} "
            f"| {_fmt(r.p99_ms)} "
            f"| {_fmt(r.lag_mid_ms)} / {_fmt(r.lag_end_ms)} | {'yes' if r.sustained else 'no'} "
            f"| {_fmt(r.cpu_us_per_record)} | {same} | {ratio} |"
        )
    lines += [
        "",
        "Highest sustained rate among those run (records/s):",
        "",
        "| query | engine | rate |",
        "|---|---|---:|",
    ]
    for key in dict.fromkeys((r.query, r.engine) for r in runs):
        held = [r.rate for r in runs if (r.query, r.engine) == key and r.sustained]
        lines.append(f"| {key[0]} | {key[1]} | {_fmt(max(held)) if held else 'none'} |")
    phased = [r for r in runs if r.phases]
    if phased:
        keys = [k for k in phased[0].phases if k not in ("batches", "input_rows", "batch_s")]
        lines += [
            "",
            "misa's mean batch (batches with input; s):",
            "",
            "| query | rate | trigger | batches | input rows | batch | "
            + " | ".join(k.removesuffix("_s") for k in keys)
            + " |",
            "|---|---:|---|---:|---:|---:|" + "---:|" * len(keys),
        ]
        for r in phased:
            p = r.phases
            cells = " | ".join(f"{p.get(k, 0):.3f}" for k in keys)
            lines.append(
                f"| {r.query} | {r.rate:g} | {r.trigger} | {p['batches']:.0f} | {p['input_rows']:.0f} "
                f"| {p['batch_s']:.3f} | {cells} |"
            )
    if refusals:
        lines += ["", "Real-time mode started on the queries it does not run:", ""]
        lines += [f"- {label}: {text}" for label, text in refusals.items()]
    differing = [(k, c) for k, c in checks.items() if not c.same]
    for (name, rate, engine), c in differing:
        lines += ["", f"{name} at {rate:g}/s, {engine} vs Spark micro-batch: {c.report()}"]
    return "\n".join(lines)
