"""The ``misa`` command's reference page, ``docs/cli.md``, generated from its parsers as :func:`build_parser` builds
them (the installed ``misa.commands`` entry points' sub-commands included), never edited by hand.

Every command and sub-command, depth first in alphabetical order, with its description, its synopsis and a table of
its arguments: flags, value names, help and defaults (:class:`~misa.cli.main.Parser` puts each option's default in
its help). The text is built here from the parsers' actions, not by argparse's help formatter, so it depends neither
on the terminal's width nor on the Python version.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterator

from misa.cli.main import build_parser
from misa.markdown import cell

CHECKOUT = Path(__file__).resolve().parents[2]  # defaults that are paths in or beside it are written relative to it

INTRO = """\
The `misa` command, installed with the package. Each command's `--help` prints what this page lists for it.
Every error is one line on stderr naming the problem and the fix: exit status 2 for a usage error, a bad URL or
a missing backend, 1 for a missing location or version, damage or a DFS out of reach, 130 for Ctrl-C; `misa -v`
adds the traceback of an unexpected error."""


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The text of ``docs/cli.md`` for ``parser`` (default: the ``misa`` command's)."""
    commands = list(_commands(parser or build_parser(), None))
    lines = [
        "# The `misa` command",
        "",
        "<!-- Generated from the misa command's parsers by `make docs` (python -m misa.docs_gen); do not edit. -->",
        "",
        INTRO,
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    lines += [f"| [`{prog}`](#{_anchor(prog)}) | {_prose(summary)} |" for prog, summary, _ in commands[1:]]
    for prog, summary, command in commands:
        lines += ["", f"## `{prog}`", "", _prose(command.description or summary), "", "```", _synopsis(command), "```"]
        rows = [_row(action, prog) for action in _arguments(command)]
        if rows:
            lines += ["", "| argument | what it does |", "| --- | --- |", *rows]
    return "\n".join(lines) + "\n"


def _commands(
    parser: argparse.ArgumentParser, summary: str | None
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(prog, one-line help, parser) of ``parser`` and of every sub-command below it, depth first, by name."""
    yield parser.prog, summary or parser.description or "", parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name in sorted(helps):  # aliases have no help entry of their own
                yield from _commands(action.choices[name], helps[name])


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a reader passes: neither ``--help`` (every command has it), nor hidden ones, nor the
    sub-command itself (its commands have their own sections)."""
    return [
        action
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and action.help != argparse.SUPPRESS
    ]


def _synopsis(parser: argparse.ArgumentParser) -> str:
    """``prog``, its required options, ``[options]`` when it has others, its positionals and its sub-command."""
    words = [parser.prog]
    optional = [a for a in _arguments(parser) if a.option_strings]
    words += [_invocation(a, first_flag=True) for a in optional if a.required]
    if any(not a.required for a in optional):
        words.append("[options]")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            words.append("COMMAND ...")
        elif not action.option_strings and action.help != argparse.SUPPRESS:
            words.append(_value(action))
    return " ".join(words)


def _row(action: argparse.Action, prog: str) -> str:
    """The table row of one argument: how it is written, and its help with its default and choices."""
    help_text = _expanded_help(action, prog)
    if action.choices is not None and action.metavar is not None:  # the value name hides them
        help_text = f"{help_text} (one of: {', '.join(map(str, action.choices))})".strip()
    required = " (required)" if action.option_strings and action.required else ""
    return f"| `{_invocation(action)}` | {_prose(help_text + required)} |"


def _invocation(action: argparse.Action, first_flag: bool = False) -> str:
    """``-v, --verbose``, ``--retain N``, ``URL``: the argument as it is written (``first_flag``: one flag only)."""
    if not action.option_strings:
        return _value(action)
    flags = action.option_strings[:1] if first_flag else action.option_strings
    text = ", ".join(flags)
    return text if action.nargs == 0 else f"{text} {_value(action)}"


def _value(action: argparse.Action) -> str:
    """The value an argument takes, with its repetition: ``N``, ``[VERSION]``, ``JOB [JOB ...]``."""
    if action.metavar is not None:
        name = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        name = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        name = action.dest.upper() if action.option_strings else action.dest
    if action.nargs == "?":
        return f"[{name}]"
    if action.nargs == "*":
        return f"[{name} ...]"
    if action.nargs == "+":
        return f"{name} [{name} ...]"
    if isinstance(action.nargs, int):
        return " ".join([name] * action.nargs)
    return name


def _expanded_help(action: argparse.Action, prog: str) -> str:
    """The help with argparse's ``%(default)s``-style fields filled in, as ``--help`` prints it."""
    if not action.help:
        return ""
    params = {k: getattr(v, "__name__", v) for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return action.help % params


def _relative(text: str) -> str:
    """``text`` with paths in the checkout or beside it (a default such as ``../shared/tools``) written relative
    to the checkout, so that the page reads the same in every checkout."""
    for folder, relative in ((CHECKOUT, ""), (CHECKOUT.parent, "../")):
        if folder != folder.parent:  # never the file system's root
            text = text.replace(f"{folder}/", relative)
    return text


def _prose(text: str) -> str:
    """``text`` for the page: a Markdown cell or paragraph, its paths relative to the checkout."""
    return cell(_relative(text))


def _anchor(prog: str) -> str:
    """GitHub's anchor of the heading ``## `prog```: lower case, spaces to dashes, other punctuation dropped."""
    return "".join(c for c in prog.lower().replace(" ", "-") if c.isalnum() or c in "-_")
