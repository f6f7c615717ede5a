"""The README's three quick starts, run as a user runs them (as `__main__`, in a fresh folder, on the project's
Kafka broker), each checked against its answer computed here from the records it writes."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"<!-- quickstart -->\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def run_quickstart(index: int) -> None:
    """Run the quick start in the current folder (the ``user_folder`` fixture's), as its script's main module."""
    assert len(BLOCKS) == 3, "README.md: expected three quick starts marked <!-- quickstart -->"
    exec(compile(BLOCKS[index], f"README.md quick start {index + 1}", "exec"), {"__name__": "__main__"})


def sliding_windows(t_ms: int, size_s: int, slide_s: int) -> list[datetime]:
    """The starts of the windows (aligned to the epoch, as Spark's) that hold the time ``t_ms``."""
    last = t_ms // (slide_s * 1000) * slide_s * 1000
    starts = range(last, t_ms - size_s * 1000, -slide_s * 1000)
    return [datetime.fromtimestamp(s / 1000, timezone.utc).replace(tzinfo=None) for s in starts]


def test_the_kafka_quick_start_counts_every_click(spark, kafka_broker, user_folder, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_broker)
    run_quickstart(0)
    expected: Counter = Counter()
    for i in range(1000):
        for start in sliding_windows(1_700_000_000_000 + i * 100, 60, 10):
            expected[(start, f"u{i % 10}")] += 1
    rows = spark.read.parquet(str(user_folder / "quickstart-out")).collect()
    final = defaultdict(int)  # update mode: a window's newest count is its largest
    for row in rows:
        key = (row["window"]["start"], row["user"])
        final[key] = max(final[key], row["n"])
    assert dict(final) == dict(expected)


def test_the_operator_quick_start_averages_every_window(spark, user_folder):
    from misa import final_results

    run_quickstart(1)
    cpus = defaultdict(list)
    for i in range(600):
        for start in sliding_windows((1_700_000_000 + i) * 1000, 30, 10):
            cpus[(start, i % 20)].append(i % 7 / 10)
    results = final_results(str(user_folder / "tasks-out"), ["window_start", "job_id"])
    got = {(k[0].replace(tzinfo=None), k[1]): round(r["avg_cpu"], 9) for k, r in results.items()}
    assert got == {k: round(sum(v) / len(v), 9) for k, v in cpus.items()}


def test_the_processor_quick_start_keeps_running_counts(spark, user_folder):
    from misa import read_batches

    run_quickstart(2)
    out = read_batches(user_folder / "counts-out")
    batches = {b: sorted(zip(t["user"].to_pylist(), t["n"].to_pylist())) for b, t in out}
    assert len(batches) == 3  # one file a batch, in the order Spark lists them
    assert batches[2] == [("u0", 16), ("u1", 16), ("u2", 14), ("u3", 14)]
    assert all(before[1] < after[1] for b in (0, 1) for before, after in zip(batches[b], batches[b + 1]))
