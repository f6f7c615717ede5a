"""The keys of a stateful node as columns of misa's source: a column as itself, anything else computed by Spark.

Spark groups by any expression (``groupBy(upper(s))``, ``groupBy((k % 2).alias("p"))``, ``groupBy(st.a)``) and
by keys of any type it orders (structs, arrays, decimals, binary). misa keys its state by plain columns
(:class:`~misa.state.codec.KeyCodec`): such a key is computed in Spark below the stateful node, as a column the
source adds (the expression itself, resolved on the source's attributes); a struct, array, decimal or binary key
as its text (:mod:`misa.query.key_text`), which an aggregation's output decodes back to Spark's type; and a
deduplication's struct by its fields (each struct's null flag, then its fields, nested structs flattened the same
way), which Spark's key compares the same. The node's output keeps Spark's own columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import types as T

from misa.operators.schema import KEY_TYPES
from misa.query.key_text import COMPOSITE, key_text
from misa.query.plan import Attr, Expr, PlanNode, attributes_of, column_of
from misa.query.translation import Translation, refused

KEY = "_misa_key{}"  # a source column misa adds for a key that is an expression or a struct's field or null flag


@dataclass(frozen=True)
class GroupKey:
    """A grouping expression of an aggregation and the source column misa groups by."""

    expr: Expr
    column: str
    text: bool = False  # the column is the key's text (misa.query.key_text), decoded in the output

    def matches(self, expr: Expr) -> bool:
        """Whether ``expr`` (an output expression of the aggregation) is this key."""
        if self.expr.attr is not None:
            return expr.attr is not None and expr.attr.expr_id == self.expr.attr.expr_id
        return expr.attr is None and bool(self.expr.jvm.semanticEquals(expr.jvm))


def group_keys(node: PlanNode, window: Attr | None, translation: Translation) -> list[GroupKey]:
    """The aggregation ``node``'s group keys but its ``window``; an expression becomes a source column."""
    keys = []
    for g in node.fields["grouping"]:
        if g.attr is not None and window is not None and g.attr.expr_id == window.expr_id:
            continue
        check_key_type(node, g.attr.name if g.attr is not None else g.sql, g.dtype)
        if (
            g.attr is None
            and window is not None
            and any(e.attr is not None and e.attr.expr_id == window.expr_id for e in g.walk())
        ):
            raise refused(
                node,
                f"it groups by {g.sql}, an expression of its window",
                "group by the window itself, and compute from it in a select after the aggregation",
            )
        if isinstance(g.dtype, COMPOSITE):
            keys.append(GroupKey(g, added_column(translation, key_text(column_of(g.jvm), g.dtype)), text=True))
        elif g.attr is not None:
            keys.append(GroupKey(g, g.attr.name))
        else:
            keys.append(GroupKey(g, added_column(translation, column_of(g.jvm))))
    return keys


def dedup_key_columns(node: PlanNode, key: Attr, translation: Translation) -> list[str]:
    """The source columns misa deduplicates ``key`` (a column of the node's input) by: itself, its text (an array, a
    decimal, binary), or a struct's null flag and fields (nested structs the same way, other fields by their text)."""
    check_key_type(node, key.name, key.dtype)
    if isinstance(key.dtype, KEY_TYPES):
        return [key.name]
    column = input_column(node, key)
    if not isinstance(key.dtype, T.StructType):
        return [added_column(translation, key_text(column, key.dtype))]
    return _struct_columns(key.name, column, key.dtype, translation)


def input_column(node: PlanNode, attr: Attr) -> Column:
    """``attr``, a column of the node's input, as a Column over misa's source: the plan's own attribute (in a chain,
    the rows below carry the plan's attributes too: :mod:`misa.query.chain`)."""
    return column_of(next(a for a in attributes_of(node.children[0]) if int(a.exprId().id()) == attr.expr_id))


def _struct_columns(name: str, struct: Column, dtype: T.StructType, translation: Translation) -> list[str]:
    columns = [added_column(translation, struct.isNull())]
    for field in dtype.fields:
        value, path = struct.getField(field.name), f"{name}.{field.name}"
        if isinstance(field.dataType, T.StructType):
            columns += _struct_columns(path, value, field.dataType, translation)
        elif isinstance(field.dataType, KEY_TYPES):
            columns.append(added_column(translation, value))
        else:
            columns.append(added_column(translation, key_text(value, field.dataType)))
    return columns


def key_column(node: PlanNode, key: Expr) -> Column:
    """The column misa keys ``key`` (an expression over the node's input, a join's key) by: itself, or its text."""
    check_key_type(node, key.sql, key.dtype)
    column = column_of(key.jvm)
    return key_text(column, key.dtype) if isinstance(key.dtype, COMPOSITE) else column


def check_key_type(node: PlanNode, name: str, dtype: T.DataType | None) -> None:
    """Refuse a key (a group key, a deduplication's or join's key) of a type misa does not key state by: a map
    (Spark groups by no map either), or a type neither misa's codec nor its key text holds (an interval, a variant),
    in the key or in a struct's field or an array's element of it."""
    unkeyed = _unkeyed(dtype)
    if unkeyed is None:
        return
    kind = dtype.simpleString() if dtype is not None else "unknown"
    inner = "" if unkeyed is dtype else f" (of {unkeyed.simpleString()})"
    if isinstance(unkeyed, T.MapType):
        raise refused(
            node,
            f"its key {name!r} is of type {kind}{inner}, a map, which Spark does not group by (a map has no order) "
            "and misa does not key state by",
            "a key of the map's entries in an order of their own (array_sort(map_entries(m))), or of its values",
        )
    raise refused(
        node,
        f"its key {name!r} is of type {kind}{inner}, which misa does not key state by",
        "keys of type integer, boolean, float, double, string, date, timestamp, decimal, binary, or structs and "
        "arrays of these, cast in the upstream",
    )


def _unkeyed(dtype: T.DataType | None) -> T.DataType | None:
    """The first type in ``dtype`` (itself, a field's, an element's) misa does not key by; None if there is none."""
    if isinstance(dtype, T.StructType):
        return next((u for u in (_unkeyed(f.dataType) for f in dtype.fields) if u is not None), None)
    if isinstance(dtype, T.ArrayType):
        return _unkeyed(dtype.elementType)
    return None if isinstance(dtype, (*KEY_TYPES, T.DecimalType, T.BinaryType)) else dtype


def added_column(translation: Translation, column: Column) -> str:
    """Add ``column`` to the translation's source rows under a name of its own; the name."""
    name = KEY.format(len(translation.extra_columns))
    translation.extra_columns.append((name, column))
    return name
