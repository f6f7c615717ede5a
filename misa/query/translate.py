"""From Spark's analyzed plan to misa's job: the source below the stateful node, the operator, the steps above.

A plan misa takes has one stateful node (an ``Aggregate``, a ``Deduplicate`` or a
``DeduplicateWithinWatermark`` over a stream with one ``withWatermark``, none, or a ``union`` of streams with one
each; an inner ``Join`` of two streams, :mod:`misa.query.joins`; or ``applyInPandasWithState``'s
``FlatMapGroupsInPandasWithState``, :mod:`misa.query.group_state`):

* **below** it, everything runs in Spark as the job's source, except the node Spark's analyzer made of
  ``window(...)`` (a ``Project`` for a tumbling window, an ``Expand`` for a sliding one): misa reads the
  window's size, slide and start time from it and assigns windows itself (sliding windows as panes); keys that
  are expressions or structs become columns of the source (:mod:`misa.query.group_keys`);
* the **stateful node** becomes misa's operator (:class:`~misa.operators.aggregation.Aggregation` or
  :class:`~misa.operators.dedup.Deduplicate`), with the watermark of the event-time column a ``withWatermark``
  marked (:mod:`misa.query.watermarks`);
* **above** it, projections and filters run on each batch's output (:mod:`misa.query.output`).

Anything else is refused at start with :class:`~misa.exceptions.UnsupportedQueryError`, naming the node and
the nearest form misa runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T

from misa.exceptions import UnsupportedQueryError
from misa.operators.aggregation import TWO_COLUMNS, Agg, Aggregation
from misa.operators.percentile_approx import Percentiles
from misa.operators.sessions import SessionAggregation
from misa.operators.sketches import KINDS as SKETCH_KINDS
from misa.operators.sketches import THETA_MIN_LG, Sketch, column_count
from misa.query.aggregates import ComputedOutputs, event_time_filters, is_listagg, listagg_element
from misa.query.chain import upstream
from misa.query.deduplication import translate_deduplication
from misa.query.group_keys import GroupKey, group_keys
from misa.query.group_state import translate_group_state
from misa.query.joins import translate_join
from misa.query.plan import DIVIDING, EXACT_PERCENTILES, Attr, Expr, PlanNode, column_of
from misa.query.translation import (
    OutputColumn,
    Translation,
    is_stateful,
    reads_stream,
    refused,
    stateful_below,
    watermarks,
)
from misa.query.watermarks import watermarked

ABOVE = ("Project", "Filter", "SubqueryAlias")
ARBITRARY_STATE = (
    "FlatMapGroupsWithState",
    "TransformWithState",
    "TransformWithStateInPandas",
    "TransformWithStateInPySpark",
)
FUNCTIONS = {"Sum": "sum", "Count": "count", "Average": "avg", "Min": "min", "Max": "max", "First": "first"}
FUNCTIONS |= {"Last": "last", "HyperLogLogPlusPlus": "approx_count_distinct"}
FUNCTIONS |= {"CollectSet": "collect_set", "CollectList": "collect_list", "CollectUnion": "collect_union"}
FUNCTIONS |= {"StddevSamp": "stddev_samp", "StddevPop": "stddev_pop"}
FUNCTIONS |= {"VarianceSamp": "var_samp", "VariancePop": "var_pop"}
FUNCTIONS |= {"CountIf": "count_if", "BoolAnd": "bool_and", "BoolOr": "bool_or", "AnyValue": "first"}
FUNCTIONS |= {"MaxBy": "max_by", "MinBy": "min_by", "Skewness": "skewness", "Kurtosis": "kurtosis"}
FUNCTIONS |= {"MaxMinByK": "max_by_k"}  # max_by(x, y, k), min_by(x, y, k)
FUNCTIONS |= {"Corr": "corr", "CovPopulation": "covar_pop", "CovSample": "covar_samp", "Mode": "mode"}
FUNCTIONS |= {"ApproximatePercentile": "percentile_approx", "PercentileDisc": "percentile_disc"}
FUNCTIONS |= {"Percentile": "percentile", "PercentileCont": "percentile", "Median": "percentile"}
FUNCTIONS |= {"BitAndAgg": "bit_and", "BitOrAgg": "bit_or", "BitXorAgg": "bit_xor", "Product": "product"}
REGRESSIONS = {"RegrSXX": "regr_sxx", "RegrSYY": "regr_syy", "RegrSXY": "regr_sxy", "RegrSlope": "regr_slope"}
REGRESSIONS |= {"RegrIntercept": "regr_intercept", "RegrR2": "regr_r2"}  # of (y, x): misa's column x, other y
PAIRED = {"RegrCount": ("count", "1"), "RegrAvgX": ("avg", "x"), "RegrAvgY": ("avg", "y")}  # over non-null pairs
FUNCTIONS |= REGRESSIONS | {kind: function for kind, (function, _) in PAIRED.items()}
FUNCTIONS |= {"HistogramNumeric": "histogram_numeric"}
FUNCTIONS |= SKETCH_KINDS  # Spark's own sketch of each batch, merged on the driver (misa.operators.sketches)
FUNCTIONS |= {"ListAgg": "listagg"}  # the list of its values (collect_list), joined by Spark's projection
SPARK_RELATIVE_SD = 0.05  # approx_count_distinct's default error, the one misa's sketch is sized for
WINDOW_MARKERS = ("spark.timeWindow", "spark.sessionWindow")  # the metadata of the window columns Spark's analyzer adds
ARGUMENT = "_misa_arg{}"  # a source column misa adds for an aggregate's argument that is an expression


@dataclass(frozen=True)
class TimeWindow:
    """``window(event_time, size, slide, start)`` as the analyzer expanded it (microseconds), or a session window."""

    event_time: Attr
    attr: Attr  # the window's grouping column (a struct of start and end)
    size_us: int = 0
    slide_us: int = 0
    start_us: int = 0
    session: bool = False


def translate(
    plan: PlanNode,
    output_mode: str,
    collect_max_items: int = 10_000,
    watermark_policy: str = "min",
    below: bool = False,
) -> Translation:
    """misa's form of ``plan``, or :class:`UnsupportedQueryError` naming the node it cannot take
    (``collect_max_items``: spark.misa.aggregate.collectMaxItems; ``watermark_policy``: Spark's
    spark.sql.streaming.multipleWatermarkPolicy; ``below``: ``plan`` is the input of another stateful operation,
    :mod:`misa.query.chain`)."""
    above, node = _above(plan)
    picks = column_picks(plan, node)
    chained = any(stateful_below(c) is not None for c in node.children)
    try:
        if node.kind == "Aggregate":
            translation = _aggregation(node, output_mode, collect_max_items, watermark_policy)
        elif node.kind == "Join":
            translation = translate_join(node, watermark_policy)
        elif node.kind == "FlatMapGroupsInPandasWithState":
            translation = translate_group_state(node, watermark_policy)
        else:
            translation = translate_deduplication(node, watermark_policy)
    except ValueError as error:  # the operator refuses the combination (its message says what to write)
        raise UnsupportedQueryError(f"[MISA_UNSUPPORTED_QUERY] misa cannot run {node.describe()!r}: {error}") from error
    translation.node = node
    if chained:  # its input is the output of the stateful operation below (misa.query.chain)
        translation.upstream = upstream(
            node,
            translation,
            lambda source: translate(source, "append", collect_max_items, watermark_policy, True),
            output_mode,
        )
    # a join's steps run on its own attributes (its two sides may share column names), and so do those below another
    # stateful operation (window_time(window) and its kind, which Spark's SQL text does not give back)
    translation.own_attributes = bool(translation.join_inputs) or below
    if not translation.join_inputs:
        translation.above = []
    if translation.own_attributes:
        translation.above += [(kind, [column_of(e.jvm) for e in exprs]) for kind, exprs in above]
    else:  # a filter on the event time in the source runs in Spark, whose watermark the operator follows
        translation.above = [(kind, [e.sql for e in exprs]) for kind, exprs in above]
    translation.stateful = node.describe()
    if above and not below:
        translation.read_above = frozenset(
            e.attr.expr_id for _, exprs in above for x in exprs for e in x.walk() if e.attr
        )
    only_selects = len(translation.above) == len(above) and all(kind == "select" for kind, _ in translation.above)
    translation.picks = picks if translation.projection is None and only_selects else None  # a join may add a where
    return translation


def column_picks(plan: PlanNode, node: PlanNode) -> list[int] | None:
    """When every step between ``plan`` and the stateful ``node`` selects columns (attributes, renamed or not),
    the positions in ``node``'s output of the query's output columns; else None (a step computes or filters)."""
    projects: list[PlanNode] = []
    while plan is not node:
        if plan.kind != "Project":
            return None
        projects.append(plan)
        plan = plan.children[0]
    positions = {a.expr_id: i for i, a in enumerate(node.output)}
    picks = list(range(len(node.output)))
    for project in reversed(projects):  # bottom up
        chosen = []
        for expr in project.fields["list"]:
            source = expr.children[0] if expr.kind == "Alias" and len(expr.children) == 1 else expr
            if source.attr is None or source.attr.expr_id not in positions:
                return None
            chosen.append(picks[positions[source.attr.expr_id]])
        positions = {a.expr_id: i for i, a in enumerate(project.output)}
        picks = chosen
    return picks


def _above(plan: PlanNode) -> tuple[list[tuple[str, list[Expr]]], PlanNode]:
    """The projections and filters above the stateful node (applied bottom up), and the node."""
    steps: list[tuple[str, list[Expr]]] = []
    node = plan
    while not is_stateful(node):
        if not reads_stream(node):
            raise refused(node, "it reads no stream", "a streaming DataFrame (spark.readStream...)")
        if node.kind in ARBITRARY_STATE:
            raise refused(
                node,
                f"arbitrary state ({node.kind}) is not run through from_query",
                "an aggregation, a deduplication or applyInPandasWithState, or the state in a misa operator of your "
                "own (docs/extending.md); a StatefulProcessor runs through misa.transform_with_state_in_pandas",
            )
        if node.kind not in ABOVE or len(node.children) != 1:
            stateful = stateful_below(node)
            if stateful is None:
                raise refused(
                    node,
                    "the query has no stateful operation misa runs",
                    "groupBy(...).agg(...), dropDuplicates(...) or dropDuplicatesWithinWatermark(...) on the "
                    "stream; a query without state needs no misa: run it in Spark",
                )
            raise refused(
                node,
                f"misa runs only projections and filters after the stateful {stateful.kind}",
                "select/where/withColumn after the aggregation, and anything else in your sink",
            )
        if node.kind == "Project":
            steps.append(("select", node.fields["list"]))
        elif node.kind == "Filter":
            steps.append(("where", [node.fields["condition"]]))
        node = node.children[0]
    return steps[::-1], node


def stateful_node(plan: PlanNode) -> PlanNode:
    """The plan's stateful node (the plan is one :func:`translate` took)."""
    found = stateful_below(plan)
    assert found is not None
    return found


# ---------------------------------------------------------------------------------------------- aggregation
def _aggregation(node: PlanNode, output_mode: str, collect_max_items: int, watermark_policy: str) -> Translation:
    window, source, conditions = _window(node)
    where = None
    if window is not None and not window.session:  # its filters on the event time run in the operator
        source, where, pushed = event_time_filters(source)
        conditions += pushed
    time_key = None if window else _event_time_key(node)
    timed = watermarked(node, source, window.event_time if window else time_key, watermark_policy)
    translation = Translation(timed.source, None, [], conditions=conditions)
    keys = group_keys(node, window.attr if window else None, translation)
    aggs = _aggs(node, keys, window.attr if window else None, translation)
    event_time, delay = None, None
    if time_key is not None:  # each group's time is its instant (misa.operators.aggregation)
        event_time = next(k.column for k in keys if k.expr.attr is not None and k.expr.attr.expr_id == time_key.expr_id)
        delay = timed.delay
    if window is not None:
        event_time, delay = window.event_time.name, timed.delay
        marks = watermarks(source)
        if delay is None and marks:
            raise refused(
                node,
                f"its window is over {window.event_time.name!r}, the watermark over "
                f"{marks[0].fields['event_time'].name!r}",
                "withWatermark on the window's time column",
            )
        if delay is None:
            translation.warnings.append(
                f"{node.describe()}: a windowed aggregation without withWatermark keeps every window forever "
                "(as Spark does): its state grows without bound; add withWatermark(...) to bound it"
            )
    if window is not None and window.session and not keys:
        raise refused(
            node,
            "a session window without group columns (Spark refuses it when the query runs)",
            "groupBy(session_window(...), key)",
        )
    if window is not None and window.session:
        translation.operator = SessionAggregation(
            [k.column for k in keys],
            aggs,
            window.attr.name,
            event_time,
            delay,
            output_mode,
            collect_max_items,
            watermark_inputs=timed.inputs,
        )
        return translation
    translation.operator = Aggregation(
        [k.column for k in keys],
        aggs,
        event_time=event_time,
        window=_ms(window.size_us) if window else None,
        slide=_ms(window.slide_us) if window else None,
        start_time=_ms(window.start_us) if window else None,
        watermark_delay=delay if window or time_key else "0s",
        output_mode=output_mode,
        collect_max_items=collect_max_items,
        watermark_inputs=timed.inputs,
        where=where,
    )
    return translation


def _event_time_key(node: PlanNode) -> Attr | None:
    """The aggregation's group column that ``withWatermark`` marked (an event time among its keys), if any."""
    marked = (g.attr for g in node.fields["grouping"] if g.attr is not None and g.attr.watermark_delay_ms is not None)
    return next(marked, None)


def _aggs(node: PlanNode, keys: list[GroupKey], window_attr: Attr | None, translation: Translation) -> list[Agg]:
    """misa's aggregates of the node, filling the translation's output columns in Spark's order."""
    aggs: list[Agg] = []
    computed = ComputedOutputs(node)
    for position, e in enumerate(node.fields["aggregates"]):
        name = e.name if e.kind == "Alias" else e.attr.name if e.attr else e.sql
        inner = e.children[0] if e.kind == "Alias" else e
        key = next((k for k in keys if k.matches(inner)), None)
        if inner.attr is not None and window_attr is not None and inner.attr.expr_id == window_attr.expr_id:
            translation.output.append(OutputColumn(name, "window"))
        elif key is not None:
            translation.output.append(OutputColumn(name, "key text" if key.text else "column", key.column))
        elif inner.kind == "AggregateExpression" and not is_listagg(inner):
            aggs.append(_agg(node, name, inner, translation))
            translation.output.append(OutputColumn(name, "column", name))
        else:  # over aggregates: misa computes them, Spark the expression from them
            for column, aggregate in computed.add(position, e):
                aggs.append(_agg(node, column, aggregate, translation))
                translation.output.append(OutputColumn(column, "column", column))
    translation.projection = computed.projection(translation.output)
    return aggs


def _agg(node: PlanNode, name: str, aggregate: Expr, translation: Translation) -> Agg:
    function = aggregate.children[0]
    if aggregate.value:
        raise refused(node, f"{aggregate.sql} is DISTINCT or FILTERed", "the aggregate without DISTINCT or FILTER")
    if function.kind not in FUNCTIONS:
        raise refused(
            node,
            f"misa does not compute {aggregate.sql} yet",
            f"one of {', '.join(FUNCTIONS.values())} (docs/spark-queries.md lists every function)",
        )
    if function.kind == "HyperLogLogPlusPlus" and function.value != SPARK_RELATIVE_SD:
        raise refused(
            node, f"{aggregate.sql} asks for relative error {function.value}", "approx_count_distinct(column)"
        )
    if function.kind in DIVIDING and not function.value:
        raise refused(
            node,
            f"{aggregate.sql} is NaN where it divides by zero under spark.sql.legacy.statisticalAggregate=true",
            "the query with Spark's default, spark.sql.legacy.statisticalAggregate=false (null there)",
        )
    arguments = function.children
    if function.value == "TRY" and not _cannot_overflow(function):
        raise refused(
            node,
            f"{aggregate.sql} is null where its sum overflows, which misa does not compute for "
            f"{arguments[0].sql}'s type",
            f"{function.kind.lower()}(col) (an overflow wraps around, or fails under spark.sql.ansi.enabled), or the "
            "try_ function of the column cast to double",
        )
    if function.kind == "ListAgg":
        return _listagg(name, aggregate, translation)
    if function.kind in SKETCH_KINDS:
        return _sketch(node, name, aggregate, translation)
    if function.kind == "MaxMinByK":  # its value and ordering columns, then k (a constant)
        k, least = function.value
        value, ordering = (_argument_column(argument, translation) for argument in function.children[:2])
        return Agg(name, "min_by_k" if least else "max_by_k", value, ordering, k=k)
    misa_function = FUNCTIONS[function.kind]
    if function.kind == "ApproximatePercentile":  # its column, then its percentage and accuracy (constants)
        percentages, array, accuracy = function.value
        percentiles = Percentiles(tuple(percentages), array, int(accuracy))
        return Agg(name, misa_function, _argument_column(arguments[0], translation), percentiles=percentiles)
    if function.kind in EXACT_PERCENTILES:  # its column, then its percentages (constants)
        percentages, array, descending, unit, legacy = function.value
        if not unit:
            raise refused(node, f"{aggregate.sql} counts each row by a frequency", "percentile(col, p)")
        if legacy:
            raise refused(
                node,
                f"{aggregate.sql} asks for Spark's legacy discrete percentile "
                "(spark.sql.legacy.percentileDiscCalculation=true)",
                "the query with the setting's default, false",
            )
        percentiles = Percentiles(tuple(percentages), array)
        misa_function += "_desc" if descending else ""
        return Agg(name, misa_function, _argument_column(arguments[0], translation), percentiles=percentiles)
    if function.kind == "HistogramNumeric":  # its column, then its number of bins (a constant)
        bins, input_type = function.value
        if not input_type:
            raise refused(
                node,
                f"{aggregate.sql} gives its bins' centres as doubles "
                "(spark.sql.legacy.histogramNumericPropagateInputType=false)",
                "the query with the setting's default, true (each centre of the input's type)",
            )
        return Agg(name, misa_function, _argument_column(arguments[0], translation), bins=bins)
    if function.kind in PAIRED:
        return Agg(name, misa_function, _paired_column(function, translation))
    if function.kind in REGRESSIONS:
        arguments = arguments[::-1]
    if len(arguments) != (2 if misa_function in TWO_COLUMNS else 1):
        raise refused(node, f"{aggregate.sql} takes {len(arguments)} columns", "an aggregate of one column")
    if function.kind == "Count" and arguments[0].kind == "Literal" and arguments[0].value is not None:
        return Agg(name, "count", "*")
    if function.kind in ("First", "Last", "AnyValue") and function.value:
        misa_function += "_ignore_nulls"
    if function.kind == "CollectUnion" and not function.value:  # RESPECT NULLS
        misa_function += "_nulls"
    if function.kind == "Mode" and function.value is False:  # mode() WITHIN GROUP (ORDER BY col DESC)
        misa_function = "mode_highest"
    columns = [_argument_column(argument, translation) for argument in arguments]
    return Agg(name, misa_function, *columns)


def _sketch(node: PlanNode, name: str, aggregate: Expr, translation: Translation) -> Agg:
    """A sketch aggregate: its column and constants (:mod:`misa.operators.sketches`)."""
    function = aggregate.children[0]
    sketch = Sketch(SKETCH_KINDS[function.kind], function.value)
    if sketch.function in ("theta_sketch_agg", "theta_union_agg") and function.value[0] < THETA_MIN_LG:
        raise refused(
            node,
            f"{aggregate.sql} asks for lgNomEntries {function.value[0]}, below the {THETA_MIN_LG} of the DataSketches "
            "library misa merges Theta sketches with",
            f"lgNomEntries of at least {THETA_MIN_LG}",
        )
    item = function.children[0].dtype
    if sketch.function in ("approx_top_k", "approx_top_k_accumulate") and getattr(item, "collation", None) not in (
        None,
        "UTF8_BINARY",
    ):
        raise refused(
            node,
            f"{aggregate.sql} counts strings by their {item.collation} collation key, whose Java hash misa does not "
            "compute",
            "the column without a collation (UTF8_BINARY), or lower() of it for a case-blind count",
        )
    columns = function.children[: column_count(sketch.function)]  # a tuple sketch's: its key and summary
    column, *other = (_argument_column(argument, translation) for argument in columns)
    return Agg(name, sketch.function, column, *other, sketch=sketch)


def _listagg(name: str, aggregate: Expr, translation: Translation) -> Agg:
    """``listagg`` (``string_agg``) as misa computes it: the list of its non-null values (``collect_list``; ordered,
    each with its order keys), which Spark's projection sorts and joins (:func:`~misa.query.aggregates.listagg_sql`)."""
    function = aggregate.children[0]
    if function.value[1]:
        return Agg(name, "collect_list", _added_column(listagg_element(function), translation))
    return Agg(name, "collect_list", _argument_column(function.children[0], translation))


def _paired_column(function: Expr, translation: Translation) -> str:
    """A column misa adds for ``regr_count``, ``regr_avgx`` or ``regr_avgy`` of (y, x): 1, x or y where both are
    non-null, else null, as Spark's replacement of them counts or averages."""
    y, x = function.children
    kept = {"1": "1", "x": x.sql, "y": y.sql}[PAIRED[function.kind][1]]
    return _added_column(f"IF(({y.sql}) IS NOT NULL AND ({x.sql}) IS NOT NULL, {kept}, NULL)", translation)


def _cannot_overflow(function: Expr) -> bool:
    """Whether ``function`` (a sum or an average) sums in doubles, where Spark's try_ mode changes nothing: a sum of
    floating values, an average of anything but decimals."""
    dtype = function.children[0].dtype
    if function.kind == "Sum":
        return isinstance(dtype, (T.FloatType, T.DoubleType))
    return not isinstance(dtype, T.DecimalType)


def _argument_column(argument: Expr, translation: Translation) -> str:
    """The source column of an aggregate's argument: its column, or one misa adds computing the expression."""
    if argument.attr is not None:
        return argument.attr.name
    return _added_column(argument.sql, translation)


def _added_column(sql: str, translation: Translation) -> str:
    """A source column misa adds computing ``sql``; its name."""
    column = ARGUMENT.format(len(translation.extra_columns))
    translation.extra_columns.append((column, sql))
    return column


def _window_node(aggregate: PlanNode) -> tuple[Attr, PlanNode, Expr] | None:
    """(window attribute, the node that assigns it, its struct expression), found under the aggregate."""
    grouping = {g.attr.expr_id for g in aggregate.fields["grouping"] if g.attr is not None}
    node = aggregate.children[0]
    while True:
        if node.kind == "Project":
            for e in node.fields["list"]:
                if e.kind == "Alias" and e.children[0].kind == "CreateNamedStruct" and _marks_a_window(e):
                    attr = next(a for a in node.output if a.name == e.name)
                    if attr.expr_id in grouping:
                        return attr, node, e.children[0]
        if node.kind == "Expand" and node.output and node.output[0].expr_id in grouping:
            return node.output[0], node, node.fields["projections"][0][0]
        if node.kind != "Filter":
            return None
        node = node.children[0]


def _marks_a_window(alias: Expr) -> bool:
    """Whether ``alias`` is a window's struct Spark's analyzer made (not a struct column a query groups by)."""
    metadata = alias.jvm.metadata()
    return any(bool(metadata.contains(marker)) for marker in WINDOW_MARKERS)


def _window(aggregate: PlanNode) -> tuple[TimeWindow | None, PlanNode, list[str]]:
    """The aggregation's time or session window, the source plan, and the filters Spark's windowing applies to it.

    A time window is read from the analyzer's expressions (``(t - start) % slide`` and ``start + size``) and
    assigned by misa, so the source is the plan below the window node; a session window's struct is kept in
    the source, as Spark computes it (``[t, t + gap)``, the gap fixed or per row)."""
    found = _window_node(aggregate)
    if found is None:
        return None, aggregate.children[0], []
    attr, assigns, struct = found
    remainders = [e for e in struct.walk() if e.kind == "Remainder"]
    event_time = next(e.attr for e in struct.walk() if e.attr is not None)
    if event_time.dtype.typeName() != "timestamp":
        raise refused(aggregate, f"its window is over {event_time.name!r} of type {event_time.dtype}", "a timestamp")
    not_null = f"`{event_time.name}` IS NOT NULL"
    if not remainders:
        return (
            TimeWindow(event_time, attr, session=True),
            assigns,
            [not_null, f"`{attr.name}`.`end` > `{attr.name}`.`start`"],
        )
    remainder = remainders[0]
    slide = remainder.children[1].value
    start = remainder.children[0].children[1].value  # (precisetimestampconversion(event_time) - start) % slide
    end = struct.children[3]
    while end.kind in ("KnownNullable", "PreciseTimestampConversion"):
        end = end.children[0]
    size = end.children[1].value  # window start + size
    return TimeWindow(event_time, attr, int(size), int(slide), int(start)), assigns.children[0], [not_null]


def _ms(us: int) -> str:
    return f"{us / 1000:g}ms"
