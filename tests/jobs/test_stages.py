"""The jobs' stage before the stateful one, run by Spark for the batch and by Arrow for the hint rows read ahead
on the driver: both name the same keys, with the same event times and counts (CM1, CM2, LR2, LR4 and YSB)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from jobs import cluster_monitoring, linear_road, ysb
from jobs.gen.cm import generate_cm
from jobs.gen.lr import generate_lr
from jobs.gen.ysb import generate_ysb
from jobs.schemas import LR_REPORTS, YSB_EVENTS
from jobs.stages import TimedFilter
from misa.io.json_arrow import read_json_lines_arrow
from misa.io.quarantine import good_records, parse_json_lines
from misa.operators.base import HintSource
from misa.operators.lookup_aggregation import LookupAggregation
from prefetch.hints import HINT_COUNT, HINT_TS, HINT_WINDOW_END, extract_partition, hint_arrow_schema, hint_frame

ARGS = argparse.Namespace(watermark_delay="10s", output_mode="update")


@dataclass(frozen=True)
class Stages:
    """A query's parts that hint extraction uses: its hint stages in Spark and in Arrow, its operator."""

    schema: StructType
    required: tuple[str, ...]
    spark: Callable[[DataFrame], DataFrame]  # the last hint stage
    arrow: Callable[[pa.Table], pa.Table]
    operator: HintSource


def query_stages(name: str) -> Stages:
    if name == "ysb":
        operator = LookupAggregation("ad_id", ysb.campaign_views(ARGS), lookup=None)  # type: ignore[arg-type]
        return Stages(YSB_EVENTS, ysb.REQUIRED, ysb.views, ysb.VIEWS.arrow, operator)
    module = cluster_monitoring if name.startswith("cm") else linear_road
    job = module.QUERIES[name]
    schema = cluster_monitoring.TASK_EVENTS if module is cluster_monitoring else LR_REPORTS
    return Stages(schema, module.REQUIRED, job.hint_stages()[-1], job.arrow_hint_stage(), job.operator(ARGS))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, list[str]]:
    folders = {name: tmp_path_factory.mktemp(name) for name in ("cm", "lr", "ysb")}
    generate_cm(folders["cm"], rate=400, seconds=20, seed=2, files_per_second=0.25, jobs=300)
    generate_lr(folders["lr"], rate=400, seconds=20, seed=2)
    generate_ysb(folders["ysb"], rate=400, seconds=20, seed=2, files_per_second=0.25)
    return {name: sorted(str(f) for f in Path(folder).glob("part-*.json")) for name, folder in folders.items()}


def per_key(table: pa.Table) -> list[tuple]:
    """Hint rows merged across partitions: each (window end, key) with its latest time and its count, sorted."""
    keys = [c for c in table.column_names if not c.startswith("_hint_")]
    merged = table.group_by(keys).aggregate([(HINT_TS, "max"), (HINT_COUNT, "sum")])
    return sorted(tuple(row.values()) for row in merged.to_pylist())


@pytest.mark.parametrize("query", ["cm1", "cm2", "lr2", "lr4", "ysb"])
def test_spark_and_arrow_give_the_same_hint_rows(spark, inputs, query):
    stages, files = query_stages(query), inputs[query[:2] if query != "ysb" else "ysb"]
    spec = stages.operator.hint_spec()
    events = good_records(parse_json_lines(spark.read.text(files), stages.schema, stages.required))
    by_spark = hint_frame(stages.operator.hint_input(stages.spark(events)), spec, None).toArrow()
    rows = stages.arrow(read_json_lines_arrow(files, stages.schema, stages.required))
    on_driver = pa.Table.from_batches(list(extract_partition(iter(rows.to_batches()), spec, None)))
    assert by_spark.num_rows > 10
    assert per_key(on_driver) == per_key(by_spark)
    assert on_driver.schema == hint_arrow_schema(rows.schema, spec)
    assert (HINT_WINDOW_END in on_driver.column_names) == spec.windowed


def test_a_timed_filter_refuses_an_unknown_unit():
    with pytest.raises(ValueError, match="unit must be one of"):
        TimedFilter("time", "ns")
