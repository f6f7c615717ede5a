"""Every Python snippet of docs/, run in the page's order in one namespace, in a fresh folder, on small data.

A page's snippets are parts of one story (a class defined in one block is used in the next), and some use names the
prose introduces (``events``, ``sink``). The setup below gives each page those names and its input files, as a reader
would have them; the snippets themselves run as printed. A page that gains Python snippets needs a setup here.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)

COMMON = """
import json
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession, functions as F

import misa

spark = SparkSession.builder.getOrCreate()


def write_json(path, rows):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(json.dumps(row) + "\\n" for row in rows))
"""

SETUP = {
    "extending.md": """
write_json("in/part-0.json", [{"k": i % 3, "v": i} for i in range(12)])
write_json("alerts-in/part-0.json", [{"user": f"u{i % 2}", "v": i} for i in range(6)])
alerts = spark.readStream.schema("user string, v long").json("alerts-in/").groupBy("user").count()
misa.ParquetBatchSink("out/")(0, pa.table({"k": [1, 2], "v": [10, 20]}))
""",
    "metrics.md": """
from misa import Agg, Aggregation, MisaConfig, ParquetBatchSink, StatefulJob

write_json("in/part-0.json", [{"k": i % 3, "v": i} for i in range(12)])
stream = spark.readStream.schema("k long, v long").json("in/")
operator = Aggregation(["k"], [Agg("total", "sum", "v")])
sink = ParquetBatchSink("out/")
config = MisaConfig.from_mapping({})
""",
    "spark-queries.md": """
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor


class FraudRule(StatefulProcessor):
    \"\"\"Flags a card whose batch has more payments than its history's count.\"\"\"

    def init(self, handle) -> None:
        self.seen = handle.getValueState("seen", "payments long")

    def handleInitialState(self, key, initialState, timerValues) -> None:
        self.seen.update((int(initialState["payments"].sum()),))

    def handleInputRows(self, key, rows, timerValues):
        n = sum(len(frame) for frame in rows)
        before = (self.seen.get() or (0,))[0]
        self.seen.update((before + n,))
        yield pd.DataFrame({"card": [key[0]], "flagged": [n > before]})

    def close(self) -> None:
        pass


write_json("in/part-0.json", [{"user": f"u{i % 3}", "t": 1_700_000_000_000 + i * 1000, "v": i} for i in range(60)])
write_json("events/part-0.json", [
    {"kind": "imp" if i % 2 == 0 else "click", "ad": i % 5, "card": f"c{i % 4}", "t": 1_700_000_000_000 + i * 500}
    for i in range(40)
])
events = (
    spark.readStream.schema("kind string, ad long, card string, t long").json("events/")
    .withColumn("event_time", F.timestamp_millis("t"))
)
history = spark.createDataFrame([("c0", 3), ("c1", 30)], "card string, payments long")
sink = misa.ParquetBatchSink("sink-out/")


def write(df, batch_id):
    df.write.mode("append").parquet("counts-out/")
""",
    "state-and-checkpoints.md": """
write_json("in/part-0.json", [
    {"time": i * 1_000_000, "job_id": i % 5, "event_type": i % 2, "cpu_request": i / 10} for i in range(40)
])
""",
}


def pages_with_snippets() -> dict[str, list[str]]:
    docs = ROOT / "docs"
    pages = {p.relative_to(docs).as_posix(): BLOCK.findall(p.read_text()) for p in docs.rglob("*.md")}
    return {name: blocks for name, blocks in sorted(pages.items()) if blocks}


def test_every_page_with_snippets_has_a_setup():
    assert sorted(pages_with_snippets()) == sorted(SETUP), "give each docs page with Python snippets a SETUP entry"


def run_page(name: str) -> dict:
    """Run the page's setup, then its snippets, in the current folder (the ``user_folder`` fixture's)."""
    names: dict = {"__name__": "__main__"}
    exec(compile(COMMON + SETUP[name], f"setup of docs/{name}", "exec"), names)
    for i, block in enumerate(pages_with_snippets()[name]):
        exec(compile(block, f"docs/{name}, snippet {i + 1}", "exec"), names)
    return names


def parquet_rows(spark, folder: Path) -> int:
    return spark.read.parquet(str(folder)).count()


@pytest.mark.slow  # 14 s of the suite's time (CI's 600 s); run on demand
def test_extending_snippets(spark, user_folder):
    run_page("extending.md")
    with sqlite3.connect(user_folder / "running_max.db") as db:
        assert sorted(db.execute("SELECT k, v FROM running_max")) == [(0, 9), (1, 10), (2, 11)]


def test_metrics_snippets(spark, user_folder):
    names = run_page("metrics.md")
    assert names["last"].record.input_rows == 12 and names["last"].batch_id == 0


@pytest.mark.slow  # 11 s of the suite's time (CI's 600 s); run on demand
def test_spark_queries_snippets(spark, user_folder):
    names = run_page("spark-queries.md")
    assert parquet_rows(spark, user_folder / "counts-out") > 0
    flagged = {r["card"]: r["flagged"] for _, t in misa_batches(user_folder / "sink-out") for r in t.to_pylist()}
    assert flagged == {"c0": True, "c1": False, "c2": True, "c3": True}
    closed = [r for _, t in misa_batches(user_folder / "sessions-out") for r in t.to_pylist()]
    assert sorted((r["card"], r["payments"]) for r in closed) == [(f"c{i}", 10) for i in range(4)]  # timed out
    assert names["job"] is not None


def test_state_and_checkpoints_snippets(spark, user_folder):
    run_page("state-and-checkpoints.md")
    assert parquet_rows(spark, user_folder / "out") > 0
    records = [json.loads(line) for line in (user_folder / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["input_rows"] == 40 and sum(r["input_rows"] for r in records) == 40


def misa_batches(folder: Path):
    from misa import read_batches

    return read_batches(folder)
