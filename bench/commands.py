"""The benchmarks' sub-commands of ``misa bench``, registered through the ``misa.commands`` entry point group."""

from __future__ import annotations

import argparse

from bench import (
    ceiling,
    ckpt,
    cm,
    crossover,
    kafka,
    live,
    page_plots,
    placement,
    processor,
    queries,
    recovery,
    spark_cpu,
    state,
    state_read,
    user_queries,
)


def add_commands(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """``misa bench ckpt``, ``state``, ``cm``, ``ceiling``, ``crossover``, ``jobs``, ``live``, ``placement``,
    ``recovery``, ``spark-cpu``, ``processor``, ``queries``, ``state-read``, ``kafka`` and ``plots``."""
    for module in (
        ckpt,
        state,
        cm,
        ceiling,
        crossover,
        queries,
        live,
        placement,
        recovery,
        spark_cpu,
        processor,
        user_queries,
        state_read,
        kafka,
        page_plots,
    ):
        module.add_parser(bench)
