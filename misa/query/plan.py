"""Spark's analyzed logical plan of a streaming DataFrame, read once at start into plain Python values.

:func:`read_plan` walks the JVM plan through Py4J and keeps what :mod:`misa.query.translate` needs: each node's
kind (the Catalyst class name: ``Aggregate``, ``Project``, ``EventTimeWatermark``, ...), its output attributes,
its expressions as trees (:class:`Expr`), and the JVM node itself, so that the part of the plan below the
stateful operation can run in Spark again as a streaming DataFrame (:func:`dataframe_of`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.classic.column import Column

from misa.operators.sketches import KINDS as SKETCH_KINDS
from misa.operators.sketches import column_count


@dataclass(frozen=True)
class Attr:
    """An attribute (a column of a node's output): Spark tells two apart by ``expr_id``, not by name."""

    name: str
    expr_id: int
    dtype: T.DataType
    watermark_delay_ms: int | None = None  # set on a column withWatermark made the event time


@dataclass(frozen=True)
class Expr:
    """A Catalyst expression: its class name, children, SQL text, and the attribute or literal it is."""

    kind: str
    children: tuple[Expr, ...]
    sql: str
    dtype: T.DataType | None = None
    attr: Attr | None = None  # an attribute reference
    value: Any = None  # a literal's value
    name: str | None = None  # an alias's name
    jvm: Any = field(default=None, repr=False, compare=False)  # the Catalyst expression
    # jvm with what Spark's SQL of it leaves out written out (:func:`_written_out`; None: nothing), its SQL ``sql``
    written: Any = field(default=None, repr=False, compare=False)

    def walk(self) -> list[Expr]:
        """This expression and every expression under it, parents first."""
        found = [self]
        for child in self.children:
            found += child.walk()
        return found


@dataclass
class PlanNode:
    """A logical plan node: ``fields`` holds the node-specific parts the translation reads."""

    kind: str
    children: list[PlanNode]
    output: list[Attr]
    jvm: Any = field(repr=False)
    fields: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """The node as Spark prints it (its first line)."""
        return str(self.jvm.simpleString(200))


def read_plan(df: DataFrame) -> PlanNode:
    """The analyzed plan of ``df`` (a streaming DataFrame of the classic, non-Connect API)."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise TypeError(
            "from_query reads the plan of a classic PySpark DataFrame; this one is from Spark Connect: "
            "build the query in a local or cluster session (SparkSession.builder.master(...))"
        )
    return plan_of(jdf.queryExecution().analyzed())


def dataframe_of(spark: SparkSession, node: PlanNode) -> DataFrame:
    """The DataFrame whose plan is ``node`` (streaming when the node reads a stream)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    jdf = jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, node.jvm)  # type: ignore[attr-defined]
    return DataFrame(jdf, spark)


def python_list(scala_seq: Any) -> list[Any]:
    """The items of a Scala sequence."""
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def plan_of(jnode: Any) -> PlanNode:
    """A JVM logical plan, read into :class:`PlanNode` values."""
    kind = str(jnode.getClass().getSimpleName())
    children = [plan_of(c) for c in python_list(jnode.children())]
    output = [_attr(a) for a in python_list(jnode.output())]
    return PlanNode(kind, children, output, jnode, _fields(kind, jnode))


def _fields(kind: str, jnode: Any) -> dict[str, Any]:
    if kind == "Project":
        return {"list": [expr_of(e) for e in python_list(jnode.projectList())]}
    if kind == "Filter":
        return {"condition": expr_of(jnode.condition())}
    if kind == "Aggregate":
        return {
            "grouping": [expr_of(e) for e in python_list(jnode.groupingExpressions())],
            "aggregates": [expr_of(e) for e in python_list(jnode.aggregateExpressions())],
        }
    if kind in ("Deduplicate", "DeduplicateWithinWatermark"):
        return {"keys": [_attr(a) for a in python_list(jnode.keys())]}
    if kind == "EventTimeWatermark":
        event_time = _attr(jnode.eventTime())
        marked = [a for a in python_list(jnode.output()) if int(a.exprId().id()) == event_time.expr_id]
        node = int(jnode.nodeId().getMostSignificantBits())  # the node's, shared by its occurrences
        return {"event_time": _attr(marked[0]), "delay": str(jnode.delay().toString()), "node": node}
    if kind == "Expand":
        return {"projections": [[expr_of(e) for e in python_list(p)] for p in python_list(jnode.projections())]}
    if kind == "FlatMapGroupsInPandasWithState":  # applyInPandasWithState: its function is read when translated
        return {
            "grouping": [_attr(a) for a in python_list(jnode.groupingAttributes())],
            "arguments": [expr_of(e) for e in python_list(jnode.functionExpr().children())],  # the function's columns
            "state": T._parse_datatype_json_string(str(jnode.stateType().json())),
            "timeout": str(jnode.timeout().toString()),
            "output_mode": str(jnode.outputMode().toString()),
        }
    if kind == "Join":
        condition = jnode.condition()
        return {
            "join_type": str(jnode.joinType().toString()),
            "condition": expr_of(condition.get()) if condition.isDefined() else None,
        }
    return {}


EXACT_PERCENTILES = ("Percentile", "PercentileDisc", "PercentileCont", "Median")  # Spark's exact percentiles
DIVIDING = ("StddevSamp", "VarianceSamp", "Skewness", "Kurtosis", "Corr", "CovSample")  # statistical aggregates
COMPLEX_TYPES = ("ArrayType", "MapType", "StructType")  # the casts to them Spark's SQL of a Cast leaves out


def expr_of(jexpr: Any) -> Expr:
    """The Python tree of a Catalyst expression."""
    kind = str(jexpr.getClass().getSimpleName())
    children = tuple(expr_of(c) for c in python_list(jexpr.children()))
    dtype = _dtype(jexpr) if jexpr.resolved() else None
    attr = _attr(jexpr) if kind == "AttributeReference" else None
    value = _literal(jexpr) if kind == "Literal" else None
    if kind == "AggregateExpression":  # value: DISTINCT or FILTER (WHERE ...), which misa does not compute
        value = bool(jexpr.isDistinct()) or bool(jexpr.filter().isDefined())
    if kind == "HyperLogLogPlusPlus":  # value: the relative error asked for
        value = float(jexpr.relativeSD())
    if kind in ("First", "Last", "AnyValue", "CollectUnion"):  # value: whether nulls are skipped
        value = bool(jexpr.ignoreNulls())
    if kind == "MaxMinByK":  # value: (k, whether min_by)
        value = (int(jexpr.k()), bool(jexpr.reverse()))
    if kind == "Mode":  # value: its order on ties (None: Spark's hash map's; True: the lowest; False: the highest)
        reverse = jexpr.reverseOpt()
        value = bool(reverse.get()) if reverse.isDefined() else None
    if kind == "ApproximatePercentile":  # value: (percentages, whether an array, accuracy), constants Spark checked
        value = (*_percentages(jexpr), jexpr.accuracyExpression().eval(None))
    if kind in EXACT_PERCENTILES:  # value: (percentages, an array, descending, frequency 1, legacy disc), constants
        exact = jexpr.replacement() if kind in ("Median", "PercentileCont") else jexpr  # Spark's Percentile for them
        frequency = exact.frequencyExpression()
        unit = bool(frequency.foldable()) and frequency.eval(None) == 1
        legacy = kind == "PercentileDisc" and bool(jexpr.legacyCalculation())
        value = (*_percentages(exact), bool(exact.reverse()), unit, legacy)
    if kind == "HistogramNumeric":  # value: (its number of bins, whether its centres keep the input's type)
        conf = SparkContext._jvm.org.apache.spark.sql.internal.SQLConf.get()  # type: ignore[attr-defined]
        value = (int(jexpr.nBins().eval(None)), bool(conf.histogramNumericPropagateInputType()))
    if kind in ("Sum", "Average"):  # value: its evaluation mode (TRY: try_sum, try_avg, null on an overflow)
        value = str((jexpr.evalContext() if kind == "Sum" else jexpr).evalMode())
    if kind == "ListAgg":  # value: (its delimiter, a constant: str, bytes or None; whether WITHIN GROUP orders it)
        delimiter = jexpr.delimiter().eval(None)
        delimiter = bytes(delimiter) if isinstance(delimiter, (bytes, bytearray)) else delimiter
        value = (None if delimiter is None else delimiter if isinstance(delimiter, bytes) else str(delimiter),)
        value += (not bool(jexpr.orderExpressions().isEmpty()),)
    if kind in SKETCH_KINDS:  # value: its constants after the columns (lgConfigK, k, eps, ...), as Spark checked them
        value = tuple(_constant(c) for c in python_list(jexpr.children())[column_count(SKETCH_KINDS[kind]) :])
    if kind in DIVIDING:  # value: null where it divides by zero (else NaN: statisticalAggregate legacy)
        value = bool(jexpr.nullOnDivideByZero())
    name = str(jexpr.name()) if kind == "Alias" else None
    written = _written_out(jexpr, kind, children)
    return Expr(kind, children, str((written or jexpr).sql()), dtype, attr, value, name, jexpr, written)


def _written_out(jexpr: Any, kind: str, children: tuple[Expr, ...]) -> Any:
    """``jexpr`` with what Spark's SQL of it leaves out written out under it, or None if it leaves out nothing: a cast
    to an array, a map or a struct (Spark's ``Cast.sql`` drops it, so the text computes the uncast value) and a
    struct's field names (``CreateNamedStruct.sql`` prints ``struct(a, b)``, naming them col1, ...), each put as an
    attribute whose SQL is ``CAST(child AS type)``, ``named_struct('name', value, ...)``."""
    written = jexpr
    if any(c.written is not None for c in children):
        written = jexpr.withNewChildren(scala_list([c.written or c.jvm for c in children]))
    text = None
    if kind == "Cast" and str(jexpr.dataType().getClass().getSimpleName()) in COMPLEX_TYPES:
        text = f"{str(jexpr.prettyName()).upper()}({written.child().sql()} AS {jexpr.dataType().sql()})"
    if kind == "CreateNamedStruct":
        text = f"named_struct({', '.join(str(c.sql()) for c in python_list(written.children()))})"
    if text is not None:
        jvm = SparkContext._jvm  # type: ignore[attr-defined]
        return jvm.org.apache.spark.sql.catalyst.expressions.PrettyAttribute(text, jexpr.dataType())
    return None if written is jexpr else written


def _constant(jexpr: Any) -> Any:
    """A constant argument's value as Python's (a number or a boolean)."""
    value = jexpr.eval(None)
    return value if value is None or isinstance(value, (bool, int, float)) else str(value)


def _percentages(jexpr: Any) -> tuple[list[float], bool]:
    """A percentile function's constant percentages, and whether Spark returns an array (an array was given)."""
    percentages = jexpr.percentageExpression().eval(None)
    array = not isinstance(percentages, float)
    return (list(percentages.toDoubleArray()) if array else [percentages]), array


def column_of(expr: Any) -> Column:
    """A Catalyst expression of the plan (an :class:`Expr`'s ``jvm``, or an attribute's) as a Column: it selects
    from a DataFrame whose plan outputs the attributes it reads (:func:`with_attributes`)."""
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    return Column(jvm.org.apache.spark.sql.classic.ExpressionUtils.column(expr))


def with_attributes(rows: DataFrame, node: PlanNode) -> DataFrame:
    """``rows`` (the columns of ``node``'s output, in order) as a DataFrame whose output is ``node``'s attributes
    themselves (names, ids and qualifiers), so that the plan's expressions above ``node`` resolve on it."""
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    expressions = jvm.org.apache.spark.sql.catalyst.expressions
    plan = rows._jdf.queryExecution().analyzed()
    aliases = [
        expressions.Alias(column, a.name(), a.exprId(), a.qualifier(), jvm.scala.Option.empty(), scala_list([]))
        for column, a in zip(python_list(plan.output()), python_list(node.jvm.output()))
    ]
    project = jvm.org.apache.spark.sql.catalyst.plans.logical.Project(scala_list(aliases), plan)
    return dataframe_of(rows.sparkSession, PlanNode("Project", [], [], project))


def with_input_column(path: list[PlanNode], name: str) -> PlanNode:
    """The plan of ``path[0]`` with one more column, ``name``: the index (0, 1, ...) of the branch of the ``Union``
    ``path[-1]`` each row comes from. ``path`` runs from the top node down to the union through projections, filters
    and aliases, which carry the column up."""
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    expressions = jvm.org.apache.spark.sql.catalyst.expressions
    project = jvm.org.apache.spark.sql.catalyst.plans.logical.Project
    union = path[-1].jvm
    branches = []
    for index, branch in enumerate(python_list(union.children())):
        literal = expressions.Literal(index, jvm.org.apache.spark.sql.types.DataTypes.IntegerType)
        tag = expressions.Alias(
            literal,
            name,
            expressions.NamedExpression.newExprId(),
            scala_list([]),
            jvm.scala.Option.empty(),
            scala_list([]),
        )
        branches.append(project(scala_list([*python_list(branch.output()), tag]), branch))
    plan = union.withNewChildren(scala_list(branches))
    tag_attribute = python_list(plan.output())[-1]
    for node in reversed(path[:-1]):
        if node.kind == "Project":
            plan = project(scala_list([*python_list(node.jvm.projectList()), tag_attribute]), plan)
        else:
            plan = node.jvm.withNewChildren(scala_list([plan]))
    return plan_of(plan)


def sql_over_aggregates(expr: Expr, columns: dict[str, str], texts: dict[str, str]) -> str:
    """The SQL of ``expr`` with each aggregate expression in it read from a column instead (``columns``: the
    aggregate's SQL -> the column's name; ``texts``: -> SQL over columns, in place of the column), as Spark's
    aggregation computes its results from its aggregates."""
    sql = str(_over_aggregates(expr, columns).sql())
    for aggregate, text in texts.items():
        sql = re.sub(rf"`?{re.escape(columns[aggregate])}`?(?!\w)", lambda _, text=text: f"({text})", sql)
    return sql


def _over_aggregates(expr: Expr, columns: dict[str, str]) -> Any:
    if expr.kind == "AggregateExpression":
        return expr.jvm.resultAttribute().withName(columns[expr.sql])
    node = expr.jvm.withNewChildren(scala_list([_over_aggregates(c, columns) for c in expr.children]))
    return _written_out(node, expr.kind, ()) or node


def attributes_of(node: PlanNode) -> list[Any]:
    """The Catalyst attributes of ``node``'s output."""
    return python_list(node.jvm.output())


def state_offset_ms(join: PlanNode, side: int) -> int | None:
    """Spark's state watermark of a stream-stream join's ``side`` (0 left, 1 right) minus the eviction watermark
    (``StreamingJoinHelper.getStateValueWatermark`` of the join's condition), or None if Spark derives none."""
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    helper = jvm.org.apache.spark.sql.catalyst.analysis.StreamingJoinHelper
    sides = (join.jvm.left().outputSet(), join.jvm.right().outputSet())
    offsets = set()
    for watermark in (10**12, 2 * 10**12):  # ms; as Longs (Py4J passes small ints as Integers)
        condition, at = join.jvm.condition(), jvm.scala.Some(watermark)
        found = helper.getStateValueWatermark(sides[side], sides[1 - side], condition, at)
        if not found.isDefined():
            return None
        offsets.add(int(found.get()) - watermark)
    if len(offsets) != 1:
        raise ValueError(f"the join's state watermark is not the eviction watermark plus a constant: {offsets}")
    return offsets.pop()


def scala_list(items: list[Any]) -> Any:
    """``items`` as a Scala list (for a Catalyst constructor or ``withNewChildren``)."""
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    java_list = jvm.java.util.ArrayList()
    for item in items:
        java_list.add(item)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toList()


def _dtype(jexpr: Any) -> T.DataType:
    return T._parse_datatype_json_string(str(jexpr.dataType().json()))


def _attr(jattr: Any) -> Attr:
    metadata = json.loads(str(jattr.metadata().json()))
    delay = metadata.get("spark.watermarkDelayMs")
    return Attr(str(jattr.name()), int(jattr.exprId().id()), _dtype(jattr), None if delay is None else int(delay))


def _literal(jexpr: Any) -> Any:
    """A literal's value: None, a Python number, bool, str or bytes (a binary literal), else its JVM text."""
    value = jexpr.value()
    if value is None or isinstance(value, (int, float, bool, str, bytes)):
        return value
    return str(value.toString())
