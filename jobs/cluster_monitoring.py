"""Cluster Monitoring (Google cluster trace task events) on the MiSA runtime or plain Spark.

    spark-submit jobs/cluster_monitoring.py --query cm1|cm2 --input DIR --output DIR --checkpoint DIR
        [--state-dir DIR] [--dfs URL] [--mode sync|async-ckpt|misa|nocommit|native|native-default] [--trigger 3s]
        [--available-now] [--max-files-per-trigger K] [--output-mode update|append] [--metrics FILE]

CM1: SUM(cpu_request) by scheduling_class over a 60 s window sliding 10 s, ordered by the sum.
CM2: AVG(cpu_request) by job_id over a 30 s window sliding 1 s, where event_type = 1.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from jobs.stages import TimedFilter
from jobs.submit import job_arguments, native_aggregation, run_job, run_query
from misa.operators.aggregation import Agg, Aggregation

TASK_EVENTS = StructType(
    [
        StructField("time", LongType()),
        StructField("missing_info", IntegerType()),
        StructField("job_id", LongType()),
        StructField("task_index", LongType()),
        StructField("machine_id", LongType()),
        StructField("event_type", IntegerType()),
        StructField("user", StringType()),
        StructField("scheduling_class", IntegerType()),
        StructField("priority", IntegerType()),
        StructField("cpu_request", DoubleType()),
        StructField("memory_request", DoubleType()),
        StructField("disk_request", DoubleType()),
        StructField("different_machines", IntegerType()),
    ]
)


@dataclass(frozen=True)
class CmQuery:
    """One Cluster Monitoring query, described once for both the runtime and plain Spark."""

    name: str
    group_by: str
    agg: Agg
    window: str
    slide: str
    where: tuple[str, int] | None  # (column, value): the rows the query keeps
    sort_by: tuple[tuple[str, str], ...]

    def timed(self, events: DataFrame) -> DataFrame:
        """The events with their event time: the earliest stage the state keys can be read from."""
        return TimedFilter("time", "us").spark(events)

    def upstream(self, events: DataFrame) -> DataFrame:
        return self._upstream.spark(events)

    def hint_stages(self) -> list[Callable[[DataFrame], DataFrame]]:
        """Candidate stages for prefetch hints, earliest first (the filter makes the first one wasteful)."""
        return [self.timed, self.upstream] if self.where else [self.upstream]

    def arrow_hint_stage(self) -> Callable[[pa.Table], pa.Table]:
        """The upstream in Arrow, for the next batch's hint rows read on the driver."""
        return self._upstream.arrow

    @property
    def _upstream(self) -> TimedFilter:
        column, value = self.where or (None, None)
        return TimedFilter("time", "us", column, value)

    def operator(self, args: argparse.Namespace) -> Aggregation:
        return Aggregation(
            [self.group_by],
            [self.agg],
            event_time="event_time",
            window=self.window,
            slide=self.slide,
            watermark_delay=args.watermark_delay,
            output_mode=args.output_mode,
        )

    def native(self, events: DataFrame, args: argparse.Namespace) -> DataFrame:
        return native_aggregation(self.operator(args), self.upstream(events))


QUERIES = {
    "cm1": CmQuery(
        "cm1",
        "scheduling_class",
        Agg("total_cpu", "sum", "cpu_request"),
        "60 seconds",
        "10 seconds",
        None,
        (("total_cpu", "descending"), ("window_start", "ascending"), ("scheduling_class", "ascending")),
    ),
    "cm2": CmQuery(
        "cm2",
        "job_id",
        Agg("avg_cpu", "avg", "cpu_request"),
        "30 seconds",
        "1 second",
        ("event_type", 1),
        (("window_start", "ascending"), ("job_id", "ascending")),
    ),
}
REQUIRED = ("time", "job_id", "event_type", "scheduling_class", "cpu_request")  # a record lacking one is bad
KEY_COLUMNS = {
    "cm1": ("window_start", "window_end", "scheduling_class"),
    "cm2": ("window_start", "window_end", "job_id"),
}


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Run one query with the parsed command line (also used in-process by the tests)."""
    run_query(spark, args, QUERIES[args.query], TASK_EVENTS, REQUIRED)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return job_arguments("Cluster Monitoring CM1/CM2", tuple(QUERIES)).parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_job(f"cluster-monitoring-{args.query}-{args.mode}", args, run)


if __name__ == "__main__":
    main()
