"""The ``misa`` console command.

The runtime's own commands are here; the packages above ``misa`` add theirs through the ``misa.commands`` entry
point group (``jobs``: ``gen``; ``services``: ``kafka``; ``verify``: ``soak``, ``fuzz``; ``bench``: every ``bench``
sub-command), in the order of the entry points' names, so ``misa`` never imports them.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from importlib.metadata import entry_points
from typing import Callable, Collection

from checkpoint.exceptions import CorruptCheckpointError, DfsUnavailableError
from common import failpoints
from common.errors import LocationError
from misa.cli import ckpt as ckpt_cli
from misa.config_docs import defaults_file_text
from misa.exceptions import CommandError, ConfigError
from misa.obs import report


def _failpoints(_: argparse.Namespace) -> int:
    for name, where in failpoints.FAILPOINTS.items():
        print(f"{name:30} {where}")
    print(
        f"\nenable with {failpoints.ENV_VAR}='name=action;...'; actions: raise, raise(N), sleep(MS), kill, kill(N), off"
    )
    return 0


def _conf(_: argparse.Namespace) -> int:
    print(defaults_file_text(), end="")
    return 0


Extension = Callable[[argparse._SubParsersAction, argparse._SubParsersAction], None]
#: What a user fixes in the command line or the location: one line, exit status 2.
USAGE_ERRORS = (ConfigError, LocationError)
#: What the command found (a missing or damaged location or version, a DFS out of reach): one line, exit 1.
FAILURES = (CommandError, DfsUnavailableError, CorruptCheckpointError)


def with_default(action: argparse.Action) -> str | None:
    """An option's help with its default after it, unless the help names it (or there is none to show)."""
    text, default = action.help or "", action.default
    hidden = default is None or default is False or default == argparse.SUPPRESS  # 0 is shown
    if action.help == argparse.SUPPRESS or hidden or "default" in text:
        return action.help
    shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
    return f"{text} (default: {shown.replace('%', '%%')})".strip()


def name_list(text: str, known: Collection[str]) -> list[str]:
    """A comma-separated command-line list of names, each one of ``known`` (else an argparse error naming them)."""
    names = text.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


class Parser(argparse.ArgumentParser):
    """``misa``'s parser and every sub-command's: each option's default in its help, a usage error in one line."""

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        action.help = with_default(action)
        return action

    def add_argument_group(self, *args, **kwargs) -> argparse._ArgumentGroup:
        """A group whose options also show their defaults."""
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument

        def add_with_default(*a, **k) -> argparse.Action:
            action = add(*a, **k)
            action.help = with_default(action)
            return action

        group.add_argument = add_with_default  # type: ignore[method-assign]
        return group

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line, with the sub-commands every installed ``misa.commands`` entry point adds (by name)."""
    parser = Parser(prog="misa", description="MiSA for PySpark: RocksDB state with asynchronous commit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log retries and progress")
    sub = parser.add_subparsers(dest="command", required=True)
    ckpt_cli.add_parser(sub)
    sub.add_parser("failpoints", help="list the failure-injection points").set_defaults(func=_failpoints)
    sub.add_parser("conf", help="print every spark.misa.* key with its default").set_defaults(func=_conf)
    report.add_parser(sub)
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_command", required=True)
    for entry in sorted(entry_points(group="misa.commands"), key=lambda entry: entry.name):
        extend: Extension = entry.load()
        extend(sub, bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; an error ends it with one line on stderr (exit status 2: a
    usage error, 1: a failure, 130: Ctrl-C); ``-v`` shows the traceback of an unexpected one."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except USAGE_ERRORS as exc:
        return _failed(args, str(exc), 2)
    except FAILURES as exc:
        return _failed(args, str(exc), 1)
    except KeyboardInterrupt:
        print("misa: stopped by Ctrl-C", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 -- any other failure: one line too, its traceback with -v
        return _failed(args, f"{type(exc).__name__}: {exc} (misa -v for the traceback)", 1)


def _failed(args: argparse.Namespace, message: str, status: int) -> int:
    """Print ``message``'s first line on stderr as misa's error (``-v``: after the traceback); ``status``."""
    if args.verbose:
        traceback.print_exc()
    print(f"misa: error: {(message.splitlines() or [''])[0]}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
