"""Differential tests: CM1 and CM2 through the runtime in each mode equal plain Spark's results."""

from pathlib import Path

import pytest
from cm_helpers import assert_same_results, run_in_process

from jobs.gen.cm import generate_cm

MODES = ["sync", "async-ckpt", "misa", "nocommit"]


@pytest.fixture(scope="module")
def cm_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("cm-input")
    generate_cm(data, rate=250, seconds=80, seed=11, files_per_second=0.125, jobs=300)
    return data


@pytest.fixture(scope="module")
def reference(spark, cm_data, tmp_path_factory):
    cache: dict = {}

    def get(query: str, output_mode: str = "update") -> dict:
        if (query, output_mode) not in cache:
            run_dir = tmp_path_factory.mktemp(f"native-{query}-{output_mode}")
            cache[query, output_mode] = run_in_process(spark, query, "native", cm_data, run_dir, output_mode)
        return cache[query, output_mode]

    return get


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", ["cm1", "cm2"])
def test_update_mode_equals_native(spark, cm_data, reference, tmp_path, query, mode):
    assert_same_results(run_in_process(spark, query, mode, cm_data, tmp_path), reference(query))


def test_spark_with_its_defaults_equals_spark_tuned(spark, cm_data, reference, tmp_path):
    """native (changelog checkpointing, format v2, bounded memory) and native-default give the same results."""
    assert_same_results(run_in_process(spark, "cm2", "native-default", cm_data, tmp_path), reference("cm2"))


@pytest.mark.parametrize("mode", ["sync", "misa"])
def test_append_mode_equals_native(spark, cm_data, reference, tmp_path, mode):
    assert_same_results(run_in_process(spark, "cm2", mode, cm_data, tmp_path, "append"), reference("cm2", "append"))


def test_metrics_record_every_batch(spark, cm_data, tmp_path):
    import json

    run_in_process(spark, "cm2", "misa", cm_data, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["batch_id"] for r in records] == list(range(len(records))) and len(records) >= 5
    assert sum(r["input_rows"] for r in records) > 0
    assert all(r["mode"] == "misa" and "phases" in r and r["latency_s"] > 0 for r in records)
    assert any(r.get("commit") for r in records)
    # one run (misa report marks a change of run_started as a restart); the commit lag at each batch's end
    assert len({r["run_started"] for r in records}) == 1 and records[0]["run_started"] <= records[0]["started"]
    assert all(set(r["commit_status"]["pending"]) <= {r["batch_id"]} for r in records)
