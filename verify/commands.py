"""The verification tools' sub-commands of ``misa``: the crash soak (``misa soak``) and the differential test against
plain Spark (``misa fuzz``), registered through the ``misa.commands`` entry point group."""

from __future__ import annotations

import argparse

from verify import soak
from verify.differential import command as fuzz


def add_commands(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """``misa soak`` and ``misa fuzz``."""
    soak.add_parser(commands)
    fuzz.add_parser(commands)
