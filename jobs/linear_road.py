"""Linear Road (position reports) on the MiSA runtime or plain Spark.

    spark-submit jobs/linear_road.py --query lr2|lr4 --input DIR --output DIR --checkpoint DIR
        [--state-dir DIR] [--dfs URL] [--mode sync|async-ckpt|misa|nocommit|native|native-default] [--trigger 3s]
        [--available-now] [--max-files-per-trigger K] [--output-mode update|append]
        [--watermark-delay 10s] [--quarantine DIR] [--metrics FILE]

Input: JSON-lines position reports (``type`` 0) with ``time`` in seconds; a record lacking any
field, or with a field of the wrong type, is quarantined (``--quarantine``, default
``CHECKPOINT/quarantine``).

LR2: each report joined with the same vehicle's reports of the 30 s before it (a windowed stream
self-join, ``prev.time >= time - 30 s AND prev.time < time``), append output; columns
``vid, time, prev_time, spd, prev_spd, seg, prev_seg`` (the later report's values, then the
earlier one's). LR4: COUNT(vid) by xway, dir, seg over a 20 s window sliding 5 s; columns
``window_start, window_end, xway, dir, seg, num_vehicles``; update output by default.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from jobs.schemas import LR_REPORTS
from jobs.stages import TimedFilter
from jobs.submit import job_arguments, native_aggregation, native_interval_join, run_job, run_query
from misa.operators.aggregation import Agg, Aggregation
from misa.operators.interval_join import IntervalJoin

REQUIRED = tuple(LR_REPORTS.names)  # a position report lacking any field is bad


REPORTS = TimedFilter("time", "s", "type", 0)
"""Position reports with their event time (``time`` is in seconds)."""


def reports(events: DataFrame) -> DataFrame:
    """Position reports with their event time, in Spark."""
    return REPORTS.spark(events)


@dataclass(frozen=True)
class Lr2:
    """Each report with the same vehicle's reports of the 30 s before it (a join emits each pair once: append only)."""

    sort_by: tuple[tuple[str, str], ...] = (("time", "ascending"), ("vid", "ascending"), ("prev_time", "ascending"))
    key_columns: tuple[str, ...] = ("vid", "time", "prev_time")
    output_modes: tuple[str, ...] = ("append",)

    def upstream(self, events: DataFrame) -> DataFrame:
        return reports(events)

    def hint_stages(self) -> list[Callable[[DataFrame], DataFrame]]:
        return [reports]

    def arrow_hint_stage(self) -> Callable[[pa.Table], pa.Table]:
        return REPORTS.arrow

    def operator(self, args: argparse.Namespace) -> IntervalJoin:
        return IntervalJoin(
            ["vid"], "event_time", ["time", "spd", "seg"], interval="30 seconds", watermark_delay=args.watermark_delay
        )

    def native(self, events: DataFrame, args: argparse.Namespace) -> DataFrame:
        return native_interval_join(self.operator(args), reports(events))


@dataclass(frozen=True)
class Lr4:
    """Vehicles per segment: COUNT(vid) by xway, dir, seg over a 20 s window sliding 5 s."""

    sort_by: tuple[tuple[str, str], ...] = (
        ("window_start", "ascending"),
        ("xway", "ascending"),
        ("dir", "ascending"),
        ("seg", "ascending"),
    )
    key_columns: tuple[str, ...] = ("window_start", "window_end", "xway", "dir", "seg")
    output_modes: tuple[str, ...] = ("update", "append")

    def upstream(self, events: DataFrame) -> DataFrame:
        return reports(events)

    def hint_stages(self) -> list[Callable[[DataFrame], DataFrame]]:
        return [reports]

    def arrow_hint_stage(self) -> Callable[[pa.Table], pa.Table]:
        return REPORTS.arrow

    def operator(self, args: argparse.Namespace) -> Aggregation:
        return Aggregation(
            ["xway", "dir", "seg"],
            [Agg("num_vehicles", "count", "vid")],
            event_time="event_time",
            window="20 seconds",
            slide="5 seconds",
            watermark_delay=args.watermark_delay,
            output_mode=args.output_mode,
        )

    def native(self, events: DataFrame, args: argparse.Namespace) -> DataFrame:
        return native_aggregation(self.operator(args), reports(events))


QUERIES: dict[str, Lr2 | Lr4] = {"lr2": Lr2(), "lr4": Lr4()}
KEY_COLUMNS = {name: query.key_columns for name, query in QUERIES.items()}


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Run one query with the parsed command line (also used in-process by the tests)."""
    run_query(spark, args, QUERIES[args.query], LR_REPORTS, REQUIRED)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``--output-mode`` defaults to the query's first mode (lr2: append, lr4: update)."""
    parser = job_arguments("Linear Road LR2/LR4", tuple(QUERIES), output_mode=None)
    args = parser.parse_args(argv)
    modes = QUERIES[args.query].output_modes
    if args.output_mode is None:
        args.output_mode = modes[0]
    elif args.output_mode not in modes:
        parser.error(f"--query {args.query} supports --output-mode {' or '.join(modes)} only")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_job(f"linear-road-{args.query}-{args.mode}", args, run)


if __name__ == "__main__":
    main()
