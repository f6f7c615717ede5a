"""The one ``misa`` command."""

from misa.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
