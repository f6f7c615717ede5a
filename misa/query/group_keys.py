"""The keys of a stateful node as columns of misa's source: a column as itself, anything else computed by Spark.

Spark groups by any expression (``groupBy(upper(s))``, ``groupBy((k % 2).alias("p"))``, ``groupBy(st.a)``) and
deduplicates by struct columns. misa keys its state by plain columns (:class:`~misa.state.codec.KeyCodec`): such a
key is computed in Spark below the stateful node, as a column the source adds (the expression itself, resolved on
the source's attributes), and a struct is keyed by its fields (each struct's null flag, then its fields, nested
structs flattened the same way), which Spark's key compares the same. The node's output keeps Spark's own columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import types as T

from misa.operators.schema import KEY_TYPES
from misa.query.plan import Attr, Expr, PlanNode, attributes_of, column_of
from misa.query.translation import Translation, refused

KEY = "_misa_key{}"  # a source column misa adds for a key that is an expression or a struct's field or null flag


@dataclass(frozen=True)
class GroupKey:
    """A grouping expression of an aggregation and the source column misa groups by."""

    expr: Expr
    column: str

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
        if g.attr is not None:
            keys.append(GroupKey(g, g.attr.name))
            continue
        if window is not None and any(e.attr is not None and e.attr.expr_id == window.expr_id for e in g.walk()):
            raise refused(
                node,
                f"it groups by {g.sql}, an expression of its window",
                "group by the window itself, and compute from it in a select after the aggregation",
            )
        keys.append(GroupKey(g, _added(translation, column_of(g.jvm))))
    return keys


def dedup_key_columns(node: PlanNode, key: Attr, translation: Translation) -> list[str]:
    """The source columns misa deduplicates ``key`` (a column of the node's input) by: itself, or a struct's null
    flag and fields (nested structs the same way)."""
    if not isinstance(key.dtype, T.StructType):
        check_key_type(node, key.name, key.dtype)
        return [key.name]
    attribute = next(a for a in attributes_of(node.children[0]) if int(a.exprId().id()) == key.expr_id)
    return _struct_columns(node, key.name, column_of(attribute), key.dtype, translation)


def _struct_columns(
    node: PlanNode, name: str, struct: Column, dtype: T.StructType, translation: Translation
) -> list[str]:
    columns = [_added(translation, struct.isNull())]
    for field in dtype.fields:
        value, path = struct.getField(field.name), f"{name}.{field.name}"
        if isinstance(field.dataType, T.StructType):
            columns += _struct_columns(node, path, value, field.dataType, translation)
        else:
            check_key_type(node, path, field.dataType)
            columns.append(_added(translation, value))
    return columns


def check_key_type(node: PlanNode, name: str, dtype: T.DataType | None) -> None:
    """Refuse a key (a group key, a deduplication's key or a struct's field of one) misa does not key state by."""
    if not isinstance(dtype, KEY_TYPES):
        kind = dtype.simpleString() if dtype is not None else "unknown"
        raise refused(
            node,
            f"its key {name!r} is of type {kind}, which misa does not key state by",
            "keys of type integer, boolean, float, double, string, date or timestamp (a struct's fields, as a "
            "deduplication's key), cast in the upstream or taken from the struct",
        )


def _added(translation: Translation, column: Column) -> str:
    """Add ``column`` to the translation's source rows under a name of its own; the name."""
    name = KEY.format(len(translation.extra_columns))
    translation.extra_columns.append((name, column))
    return name
