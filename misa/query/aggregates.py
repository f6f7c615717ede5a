"""Two parts of an aggregation's plan that Spark computes around its aggregates, taken as Spark runs them.

* **Expressions over aggregates** inside ``agg`` (``agg((sum(v) * 2).alias("x"))``): Spark's aggregation computes
  the aggregates, then its result expressions from them. misa computes each aggregate in such an expression as a
  column of its own (:data:`COLUMN`), and Spark the expression from those columns on each batch's output, as SQL
  read from the plan (:class:`ComputedOutputs`, :class:`~misa.query.translation.Projection`).
* **A filter on the event time** between ``withWatermark`` and a window's aggregation: Spark's optimizer keeps its
  conjuncts on the event time above the watermark node, whose watermark then counts the rows they drop, and pushes
  the other conjuncts below it (:func:`event_time_filters`); misa's aggregation applies the first after its
  watermark saw the rows (``Aggregation(where=...)``). (The operator's watermark is Spark's own anyway,
  :mod:`misa.runtime.watermark_sync`: a filter left in the source, under a projection or before a session window
  or a deduplication, runs in Spark above its watermark node, which counts the rows it drops.)
"""

from __future__ import annotations

from pyspark.sql import types as T

from misa.query.plan import Expr, PlanNode, sql_over_aggregates
from misa.query.translation import OutputColumn, Projection

COLUMN = "_misa_agg{}"  # misa's output column of an aggregate inside an expression over aggregates


class ComputedOutputs:
    """The outputs of an ``Aggregate`` node that compute over its aggregates, as SQL over misa's columns."""

    def __init__(self, node: PlanNode):
        self.node = node
        self.columns: dict[str, tuple[str, Expr]] = {}  # an aggregate's SQL -> (its column, the aggregate)
        self.texts: dict[str, str] = {}  # an aggregate's SQL -> SQL over its column (listagg's)
        self.computed: dict[int, str] = {}  # the position of an output -> its SQL

    def add(self, position: int, output: Expr) -> list[tuple[str, Expr]]:
        """Output ``position`` of the node, ``output``, is computed; the aggregates in it misa computes anew, with
        their columns."""
        new = []
        for e in output.walk():
            if e.kind == "AggregateExpression" and e.sql not in self.columns:
                self.columns[e.sql] = (COLUMN.format(len(self.columns)), e)
                new.append(self.columns[e.sql])
                if is_listagg(e):
                    self.texts[e.sql] = listagg_sql(self.columns[e.sql][0], e)
        columns = {sql: c for sql, (c, _) in self.columns.items()}
        self.computed[position] = sql_over_aggregates(output, columns, self.texts)
        return new

    def projection(self, output: list[OutputColumn]) -> Projection | None:
        """The node's output from misa's ``output`` columns (None: no output is computed)."""
        if not self.computed:
            return None
        types = {a.name: a.dtype for a in self.node.output} | {c: _column_type(e) for c, e in self.columns.values()}
        columns = T.StructType([T.StructField(c.name, types[c.name]) for c in output])
        names = ["`" + a.name.replace("`", "``") + "`" for a in self.node.output]
        return Projection(columns, [self.computed.get(i, name) for i, name in enumerate(names)])


def is_listagg(aggregate: Expr) -> bool:
    """Whether ``aggregate`` is ``listagg`` (``string_agg``): misa collects its values (``collect_list``) and
    Spark joins them (:func:`listagg_sql`)."""
    return aggregate.children[0].kind == "ListAgg"


def listagg_sql(column: str, aggregate: Expr) -> str:
    """Spark's ``listagg`` of the non-null values misa collected into ``column`` in Spark's order: their
    concatenation with the delimiter between them (none: nothing between), null when there is no value. Ordered
    (``WITHIN GROUP (ORDER BY ...)``), ``column`` holds each value with its order keys (:func:`listagg_element`),
    sorted here as Spark sorts its buffer: stably, ties in the order Spark read the rows."""
    function = aggregate.children[0]
    delimiter, c = function.value[0], f"`{column}`"
    if function.value[1]:
        c = f"transform({_sorted_elements(c, listagg_orders(function))}, e -> e.x.v)"
    if isinstance(function.dtype, T.BinaryType):
        between = f"X'{(delimiter or b'').hex()}'"
        joined = f"reduce(slice({c}, 2, size({c})), {c}[0], (acc, v) -> concat(acc, {between}, v))"
    else:
        text = (delimiter or "").replace("\\", "\\\\").replace("'", "\\'")
        joined = f"array_join({c}, '{text}')"
    return f"IF(size({c}) = 0, NULL, {joined})"


def listagg_orders(function: Expr) -> list[tuple[Expr, bool, bool]]:
    """An ordered ``listagg``'s order keys: (expression, ascending, nulls first) each."""
    orders = function.children[2:]
    return [
        (o.children[0], str(o.jvm.direction().sql()) == "ASC", "FIRST" in str(o.jvm.nullOrdering().sql()))
        for o in orders
    ]


def listagg_element(function: Expr) -> str:
    """The SQL of what misa collects for an ordered ``listagg``: the value and its order keys (null without a
    value, which collect_list skips as Spark's buffer does)."""
    value = function.children[0].sql
    keys = "".join(f", 'o{i}', {e.sql}" for i, (e, _, _) in enumerate(listagg_orders(function)))
    return f"IF(({value}) IS NULL, NULL, named_struct('v', {value}{keys}))"


def _sorted_elements(column: str, orders: list[tuple[Expr, bool, bool]]) -> str:
    """``column``'s elements, each with its place (``i``), sorted by the order keys, ties by place (stable)."""
    compare = "IF(l.i < r.i, -1, IF(l.i > r.i, 1, 0))"
    for i, (_, ascending, nulls_first) in reversed(list(enumerate(orders))):
        a, b = f"l.x.o{i}", f"r.x.o{i}"
        null = -1 if nulls_first else 1
        less = -1 if ascending else 1
        compare = (
            f"CASE WHEN {a} <=> {b} THEN {compare} WHEN {a} IS NULL THEN {null} WHEN {b} IS NULL THEN {-null} "
            f"WHEN {a} < {b} THEN {less} ELSE {-less} END"
        )
    placed = f"transform({column}, (x, i) -> named_struct('x', x, 'i', i))"
    return f"array_sort({placed}, (l, r) -> {compare})"


def _column_type(aggregate: Expr) -> T.DataType:
    """The type of misa's column of ``aggregate``: listagg's is the list of its values (ordered: with their order
    keys)."""
    if not is_listagg(aggregate):
        return aggregate.dtype
    function = aggregate.children[0]
    element = function.children[0].dtype
    if function.value[1]:
        keys = [T.StructField(f"o{i}", e.dtype) for i, (e, _, _) in enumerate(listagg_orders(function))]
        element = T.StructType([T.StructField("v", element), *keys])
    return T.ArrayType(element, containsNull=False)


def event_time_filters(source: PlanNode) -> tuple[PlanNode, str | None, list[str]]:
    """The filters at the top of ``source`` (a window's input) split as Spark's optimizer splits them at a watermark:
    the plan below them, their conjuncts on the event time (SQL, None if none; a check that it is not null aside,
    which drops no event time) and the others (SQL). Without conjuncts on the event time ``source`` stays whole."""
    node, on_time, others = source, [], []
    while node.kind == "Filter":
        for conjunct in _conjuncts(node.fields["condition"]):
            marked = any(e.attr is not None and e.attr.watermark_delay_ms is not None for e in conjunct.walk())
            (on_time if marked and conjunct.kind != "IsNotNull" else others).append(conjunct.sql)
        node = node.children[0]
    if not on_time:
        return source, None, []
    return node, " AND ".join(f"({c})" for c in on_time), others


def _conjuncts(condition: Expr) -> list[Expr]:
    if condition.kind == "And":
        return [c for child in condition.children for c in _conjuncts(child)]
    return [condition]
