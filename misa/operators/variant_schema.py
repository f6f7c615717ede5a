"""Spark's ``schema_of_variant_agg`` over misa's states: a batch's partial of a group is Spark's own schema of its
variants (the text ``OBJECT<a: BIGINT, b: ARRAY<STRING>>`` Spark prints), merged on the driver into the stored one
as Spark merges two schemas (``SchemaOfVariant.mergeSchema``: JSON inference's ``compatibleType`` after the
analyzer's tightest common type, ``VARIANT`` where none fits), and printed as Spark prints it.

A type is its SQL name (``BIGINT``, ``VOID``, ``VARIANT``, ...), ``("DECIMAL", precision, scale)``,
``("ARRAY", element)`` or ``("OBJECT", ((name, type), ...))``.
"""

from __future__ import annotations

import re
from typing import Any

Type = str | tuple[Any, ...]
NUMERIC_PRECEDENCE = ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE")
DATETIMES = ("DATE", "TIMESTAMP_NTZ", "TIMESTAMP")  # the wider last
LONG_AS_DECIMAL = ("DECIMAL", 20, 0)
MAX_PRECISION = 38
UNQUOTED = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def merge_printed(stored: str, batch: str) -> str:
    """The schema of two printed schemas' variants together, printed."""
    return printed(merge(parse(stored), parse(batch)))


def merge(a: Type, b: Type) -> Type:
    """``JsonInferSchema.compatibleType(a, b, VARIANT)``."""
    tightest = _tightest(a, b)
    if tightest is not None:
        return tightest
    kinds = {_kind(a), _kind(b)}
    if kinds in ({"DECIMAL", "DOUBLE"}, {"DECIMAL", "FLOAT"}):
        return "DOUBLE"
    if kinds == {"DECIMAL"}:
        scale = max(a[2], b[2])
        digits = max(a[1] - a[2], b[1] - b[2])
        return "DOUBLE" if digits + scale > MAX_PRECISION else ("DECIMAL", digits + scale, scale)
    if kinds == {"OBJECT"}:
        return ("OBJECT", _merged_fields(a[1], b[1]))
    if kinds == {"ARRAY"}:
        return ("ARRAY", merge(a[1], b[1]))
    if kinds == {"DECIMAL", "BIGINT"}:
        return merge(*(LONG_AS_DECIMAL if t == "BIGINT" else t for t in (a, b)))
    return "VARIANT"


def _tightest(a: Type, b: Type) -> Type | None:
    """The analyzer's ``findTightestCommonType`` over the types a variant holds (case-insensitive field names)."""
    if a == b:
        return a
    if a == "VOID" or b == "VOID":
        return b if a == "VOID" else a
    kinds = (_kind(a), _kind(b))
    if kinds in (("BIGINT", "DECIMAL"), ("DECIMAL", "BIGINT")):
        decimal = a if kinds[0] == "DECIMAL" else b
        return decimal if decimal[1] - decimal[2] >= 20 and decimal[2] >= 0 else None
    if all(k in NUMERIC_PRECEDENCE for k in kinds):
        return max(kinds, key=NUMERIC_PRECEDENCE.index)
    if all(k in DATETIMES for k in kinds):
        return max(kinds, key=DATETIMES.index)
    if kinds == ("ARRAY", "ARRAY"):
        element = _tightest(a[1], b[1])
        return None if element is None else ("ARRAY", element)
    if kinds == ("OBJECT", "OBJECT") and len(a[1]) == len(b[1]):
        fields = []
        for (name, x), (other, y) in zip(a[1], b[1]):
            common = _tightest(x, y) if name.lower() == other.lower() else None
            if common is None:
                return None
            fields.append((name, common))
        return ("OBJECT", tuple(fields))
    return None


def _merged_fields(a: tuple[tuple[str, Type], ...], b: tuple[tuple[str, Type], ...]) -> tuple[tuple[str, Type], ...]:
    """Two objects' sorted fields merged by name (Java's order: UTF-16 code units), a shared name's types merged."""
    fields: list[tuple[str, Type]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        left, right = _utf16(a[i][0]), _utf16(b[j][0])
        if left == right:
            fields.append((a[i][0], merge(a[i][1], b[j][1])))
            i, j = i + 1, j + 1
        elif left < right:
            fields.append(a[i])
            i += 1
        else:
            fields.append(b[j])
            j += 1
    return (*fields, *a[i:], *b[j:])


def _utf16(name: str) -> bytes:
    return name.encode("utf-16-be")


def _kind(t: Type) -> str:
    return t if isinstance(t, str) else t[0]


def printed(t: Type) -> str:
    """Spark's ``printSchema``: ``OBJECT<name: type, ...>`` (a name quoted where it is not an identifier),
    ``ARRAY<type>``, else the type's SQL name."""
    if isinstance(t, str):
        return t
    if t[0] == "DECIMAL":
        return f"DECIMAL({t[1]},{t[2]})"
    if t[0] == "ARRAY":
        return f"ARRAY<{printed(t[1])}>"
    return "OBJECT<" + ", ".join(f"{_quoted(name)}: {printed(field)}" for name, field in t[1]) + ">"


def _quoted(name: str) -> str:
    return name if UNQUOTED.fullmatch(name) else "`" + name.replace("`", "``") + "`"


def parse(text: str) -> Type:
    """A type from Spark's printed schema."""
    t, end = _parse(text, 0)
    if end != len(text):
        raise ValueError(f"schema_of_variant_agg: cannot read {text!r} past position {end}")
    return t


def _parse(text: str, at: int) -> tuple[Type, int]:
    if text.startswith("OBJECT<", at):
        at += len("OBJECT<")
        fields = []
        while text[at] != ">":
            name, at = _name(text, at)
            field, at = _parse(text, at + len(": "))
            fields.append((name, field))
            at += len(", ") if text.startswith(", ", at) else 0
        return ("OBJECT", tuple(fields)), at + 1
    if text.startswith("ARRAY<", at):
        element, at = _parse(text, at + len("ARRAY<"))
        return ("ARRAY", element), at + 1
    if text.startswith("DECIMAL(", at):
        end = text.index(")", at)
        precision, scale = text[at + len("DECIMAL(") : end].split(",")
        return ("DECIMAL", int(precision), int(scale)), end + 1
    match = re.compile(r"[A-Z_]+").match(text, at)
    if match is None:
        raise ValueError(f"schema_of_variant_agg: no type at position {at} of {text!r}")
    return match.group(), match.end()


def _name(text: str, at: int) -> tuple[str, int]:
    """A field's name (backquoted, its backquotes doubled, or a plain identifier) and where its ``: `` starts."""
    if text[at] != "`":
        end = text.index(": ", at)
        return text[at:end], end
    name, at = [], at + 1
    while True:
        end = text.index("`", at)
        name.append(text[at:end])
        if not text.startswith("``", end):
            return "`".join(name), end + 1
        at = end + 2
