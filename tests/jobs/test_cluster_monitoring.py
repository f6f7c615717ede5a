"""Differential tests: CM1 and CM2 through the runtime in each mode, and plain Spark (native), equal a reference
computed with pandas from the generated input (cm_helpers.expected_results)."""

import json
from pathlib import Path

import pytest
from cm_helpers import assert_same_results, expected_results, read_events, run_in_process

from jobs.gen.cm import generate_cm

MODES = ["sync", "async-ckpt", "misa", "nocommit"]


@pytest.fixture(scope="module")
def cm_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("cm-input")
    generate_cm(data, rate=250, seconds=80, seed=11, files_per_second=0.125, jobs=300, progress=False)
    return data


@pytest.fixture(scope="module")
def reference(cm_data):
    cache: dict = {}

    def get(query: str, output_mode: str = "update") -> dict:
        if (query, output_mode) not in cache:
            cache[query, output_mode] = expected_results(cm_data, query, output_mode)
        return cache[query, output_mode]

    return get


def test_the_reference_has_many_windows_and_groups_and_append_leaves_out_the_open_windows(reference):
    for query, windows, groups in (("cm1", 13, 4), ("cm2", 109, 300)):  # 80 s of events; 4 classes, 300 jobs
        keys = reference(query)
        assert (len({k[:2] for k in keys}), len({k[2] for k in keys})) == (windows, groups), query
    append, update = reference("cm2", "append"), reference("cm2")
    assert set(append) < set(update) and all(append[k] == update[k] for k in append)
    assert max(k[1] for k in append) < max(k[1] for k in update)


@pytest.mark.parametrize(
    "query,mode",
    [
        pytest.param("cm1", "native", marks=pytest.mark.slow),
        pytest.param("cm2", "native", marks=pytest.mark.slow),  # the reference model against plain Spark: -m slow
        pytest.param("cm2", "native-default", marks=pytest.mark.slow),
    ],
)
def test_plain_spark_equals_the_reference(spark, cm_data, reference, tmp_path, query, mode):
    """native (changelog checkpointing, format v2, bounded memory) and native-default (Spark's defaults)."""
    assert_same_results(run_in_process(spark, query, mode, cm_data, tmp_path), reference(query))


@pytest.mark.parametrize(
    "query,mode",
    [
        # on demand: make test runs CM2 in misa mode in update mode on a local cluster (test_executor_placement) and
        # in append mode below; the differential cases draw the commit mode
        pytest.param(q, m, marks=pytest.mark.slow)
        for q in ("cm1", "cm2")
        for m in MODES
    ],
)
def test_update_mode_equals_the_reference(spark, cm_data, reference, tmp_path, query, mode):
    assert_same_results(run_in_process(spark, query, mode, cm_data, tmp_path), reference(query))


# on demand: make test's local-cluster case runs the CM2 job in misa mode against plain Spark
@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.slow) for m in ("native", "sync", "misa")])
def test_append_mode_equals_the_reference(spark, cm_data, reference, tmp_path, mode):
    assert_same_results(run_in_process(spark, "cm2", mode, cm_data, tmp_path, "append"), reference("cm2", "append"))


@pytest.mark.slow  # the suite's time (each Python source adds ~1.5 s to a query's start)
def test_metrics_record_every_batch(spark, cm_data, tmp_path):
    run_in_process(spark, "cm2", "misa", cm_data, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["batch_id"] for r in records] == list(range(len(records))) and len(records) >= 5
    assert sum(r["input_rows"] for r in records) == len(read_events(cm_data))  # every record, once
    assert all(r["mode"] == "misa" and r["input_rows"] == r["spark_input_rows"] for r in records)
    # Spark's trigger contains its addBatch, which contains the runtime's batch (Spark's times are whole ms)
    assert all(r["latency_s"] >= r["add_batch_s"] >= r["batch_s"] - 0.002 for r in records)
    assert any(r.get("commit") for r in records)
    # one run (misa report marks a change of run_started as a restart); the commit lag at each batch's end
    assert len({r["run_started"] for r in records}) == 1 and records[0]["run_started"] <= records[0]["started"]
    assert all(set(r["commit_status"]["pending"]) <= {r["batch_id"]} for r in records)
