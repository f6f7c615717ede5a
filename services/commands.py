"""The services' sub-command of ``misa``: the project's Kafka broker (``misa kafka``), registered through the
``misa.commands`` entry point group."""

from __future__ import annotations

import argparse

from services import kafka_command


def add_commands(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """``misa kafka ...``."""
    kafka_command.add_parser(commands)
