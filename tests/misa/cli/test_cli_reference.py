"""docs/cli.md's text: every command and sub-command with its arguments, built from the parsers themselves."""

import argparse

from misa.cli.main import Parser
from misa.cli.reference import CHECKOUT, cli_markdown


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tool", description="A tool.")
    parser.add_argument("-v", "--verbose", action="store_true", help="say more")
    sub = parser.add_subparsers(dest="command", required=True)
    zeta = sub.add_parser("zeta", help="the last | one")
    zeta.add_argument("url", metavar="URL", help="where <s> is")
    zeta.add_argument("version", metavar="VERSION", nargs="?", type=int, help="only this one")
    zeta.add_argument("--retain", metavar="N", type=int, default=10, help="versions to keep, %(default)s")
    zeta.add_argument("--mode", choices=["a", "b"], default="a", help="how")
    zeta.add_argument("--out", required=True, help="where to")
    zeta.add_argument("--tools", default=str(CHECKOUT.parent / "shared" / "tools"), help="tools")
    zeta.add_argument("--hidden", help=argparse.SUPPRESS)
    zeta.add_argument("--name", help="a name for %(prog)s")
    alpha = sub.add_parser("alpha", help="the first")
    alpha.add_subparsers(dest="alpha_command", required=True).add_parser("inner", help="below alpha")
    return parser


def test_every_command_in_name_order_with_its_synopsis_and_arguments():
    text = cli_markdown(_parser())
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## `tool`", "## `tool alpha`", "## `tool alpha inner`", "## `tool zeta`"]
    assert "| [`tool zeta`](#tool-zeta) | the last \\| one |" in text
    assert "```\ntool zeta --out OUT [options] URL [VERSION]\n```" in text
    assert "```\ntool alpha COMMAND ...\n```" in text
    assert "| `-v, --verbose` | say more |" in text
    assert "| `URL` | where &lt;s> is |" in text
    assert "| `--retain N` | versions to keep, 10 |" in text  # the help names the default: not added twice
    assert "| `--mode {a,b}` | how (default: a) |" in text
    assert "| `--out OUT` | where to (required) |" in text
    assert "| `--tools TOOLS` | tools (default: ../shared/tools) |" in text  # the same in every checkout
    assert "| `--name NAME` | a name for tool zeta |" in text
    assert "hidden" not in text and "--help" not in text.split("## `tool`")[1]


def test_the_page_does_not_depend_on_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = cli_markdown()
    monkeypatch.setenv("COLUMNS", "400")
    assert cli_markdown() == narrow
    assert "## `misa ckpt gc`" in narrow and "| `--retain N` |" in narrow
