"""Text made safe for the generated Markdown pages (``docs/configuration.md``, ``docs/cli.md``)."""

from __future__ import annotations


def cell(text: str) -> str:
    """``text`` on one line, safe in a Markdown table cell or paragraph: no cell break, no HTML tag, no emphasis."""
    for raw, escaped in (("\\", "\\\\"), ("|", "\\|"), ("*", "\\*"), ("<", "&lt;")):
        text = text.replace(raw, escaped)
    return " ".join(text.split())
