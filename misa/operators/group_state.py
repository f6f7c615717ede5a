"""Spark's ``applyInPandasWithState`` on misa: the user's function called per group with Spark's own ``GroupState``.

``df.groupBy(keys).applyInPandasWithState(func, outputStructType, stateStructType, outputMode, timeoutConf)`` runs
as a :class:`~misa.operators.processor.StatefulProcessorOperator` over :class:`GroupStateFunction`, a
``StatefulProcessor`` that calls ``func(key, pdfs, state)`` as Spark's Python worker does, with
:class:`pyspark.sql.streaming.state.GroupState` itself (so ``get``, ``getOption``, ``exists``, ``update``,
``remove``, ``setTimeoutDuration``, ``setTimeoutTimestamp``, ``hasTimedOut``, ``getCurrentWatermarkMs`` and
``getCurrentProcessingTimeMs`` check and behave as Spark's). The group's value is a value state variable in misa's
store, its timeout a timer of the processor's (at the timeout plus 1 ms: Spark times a group out when its timeout is
*before* the batch's processing time or watermark, a timer fires *at or before* it).

What Spark's ``FlatMapGroupsInPandasWithStateExec`` does, and so does this:

* per batch, ``func`` once per key with rows (rows at or before the watermark dropped under ``EventTimeTimeout``
  only), then once per group whose timeout passed (``hasTimedOut``, one empty DataFrame of the input's columns), the
  batch's keys first (their new timeouts seen by the timeout pass);
* each call's ``GroupState`` starts without a timeout; after the call the state is written only when the function
  updated or removed it or set a timeout (else the stored value *and timeout* stay: a timed-out group whose call
  changes nothing times out again in the next batch); removed without a timeout, the group is gone; removed with
  one, the timeout stays without a value;
* ``EventTimeTimeout``'s timeouts also in the batch Spark runs without data when the watermark moved;
  ``NoTimeout`` and ``ProcessingTimeTimeout`` run no batch without data (Spark runs one after every batch for
  processing-time timeouts: see docs/spark-queries.md);
* the rows as pandas DataFrames converted as Spark's worker converts them (the session's time zone), the key as
  the tuple of the key columns' first values, the output converted as Spark converts it.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.errors import PySparkTypeError
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from misa.operators.group_state_values import given, stored
from misa.operators.pandas_conversion import PandasConversion
from misa.operators.processor import StatefulProcessorOperator

TIMEOUTS = {  # Spark's GroupStateTimeout -> the processor's time mode that fires its timers
    GroupStateTimeout.NoTimeout: "None",
    GroupStateTimeout.ProcessingTimeTimeout: "ProcessingTime",
    GroupStateTimeout.EventTimeTimeout: "EventTime",
}
VALUE_STATE = "groupState"  # the state variable holding each group's value (its name in the state reader)
KEY_STATE = "groupKey"  # with a key kept by its text and timeouts: the key the function got last, pickled
KEY_SCHEMA = T.StructType([T.StructField("key", T.BinaryType())])


class GroupStateFunction(StatefulProcessor):
    """``func(key, pdfs, state)`` of ``applyInPandasWithState`` as a StatefulProcessor over misa's state."""

    def __init__(
        self,
        func: Callable[..., Iterable[pd.DataFrame]],
        output_schema: T.StructType,
        state_schema: T.StructType,
        timeout: str,
        watermark_present: bool,
        columns: list[str],
        keeps_keys: bool = False,
    ):
        if timeout not in TIMEOUTS:
            raise ValueError(f"timeoutConf {timeout!r}: use one of {', '.join(TIMEOUTS)} (Spark's GroupStateTimeout)")
        self.func = func
        self.output_schema = output_schema
        self.state_schema = state_schema
        self.timeout = timeout
        self.watermark_present = watermark_present
        self.columns = columns  # the input's columns: a timed-out call's empty DataFrame has them
        # the state is keyed by a key's text (a struct, an array, a decimal, binary): a timed-out group's call gets
        # the key its last call with rows got, kept beside its value
        self.keeps_keys = keeps_keys

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.value = handle.getValueState(VALUE_STATE, self.state_schema)
        self.key = handle.getValueState(KEY_STATE, KEY_SCHEMA) if self.keeps_keys else None

    def handleInputRows(  # noqa: N802 - Spark's names
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        if self.key is not None:
            self.key.update((pickle.dumps(key, protocol=5),))
        return iter(self._call(key, rows, timerValues, None))

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        empty = [pd.DataFrame(columns=self.columns)]  # as Spark's worker calls a timed-out group
        if self.key is not None:
            key = pickle.loads(self.key.get()[0])
        return iter(self._call(key, empty, timerValues, expiredTimerInfo.getExpiryTimeInMs()))

    def close(self) -> None:
        pass

    def _call(
        self, key: tuple, rows: Iterable[pd.DataFrame], times: TimerValues, timer_ms: int | None
    ) -> list[pd.DataFrame]:
        """One call of the function (``timer_ms``: the timed-out group's timer), its state written as Spark's
        operator writes it once the function's output is consumed."""
        value = self.value.get()
        state = GroupState(
            optionalValue=None if value is None else given(value, self.state_schema),
            batchProcessingTimeMs=times.getCurrentProcessingTimeInMs(),
            eventTimeWatermarkMs=times.getCurrentWatermarkInMs(),
            timeoutConf=self.timeout,
            hasTimedOut=timer_ms is not None,
            watermarkPresent=self.watermark_present,
            defined=value is not None,
            updated=False,
            removed=False,
            timeoutTimestamp=GroupState.NO_TIMESTAMP,
            keyAsUnsafe=b"",
            valueSchema=self.state_schema,
        )
        result = self.func(key, rows, state)
        if isinstance(result, pd.DataFrame) or not isinstance(result, Iterable):
            raise PySparkTypeError(
                f"applyInPandasWithState's function returned a {type(result).__name__}: return (or yield) an "
                "iterator of pandas.DataFrame"
            )
        outputs = [self._checked(frame) for frame in result]
        self._write(state, timer_ms)
        return outputs

    def _checked(self, frame: Any) -> pd.DataFrame:
        """An output DataFrame as Spark's worker checks it: a DataFrame of the output's columns (or none, empty)."""
        if not isinstance(frame, pd.DataFrame):
            raise PySparkTypeError(
                f"applyInPandasWithState's function yielded a {type(frame).__name__}: yield pandas.DataFrame"
            )
        width = len(self.output_schema.fields)
        if len(frame.columns) != width and not (len(frame.columns) == 0 and frame.empty):
            raise PySparkTypeError(
                f"applyInPandasWithState's function yielded {len(frame.columns)} columns, its outputStructType "
                f"has {width}: {self.output_schema.simpleString()}"
            )
        return frame

    def _write(self, state: GroupState, timer_ms: int | None) -> None:
        """Spark's rule: remove the group when removed without a timeout; write value and timeout when updated,
        removed or given a timeout; else leave both as stored (a timed-out group's timer set again)."""
        timeout = int(state._timeout_timestamp)
        if state._removed and timeout == GroupState.NO_TIMESTAMP:
            self.value.clear()
            if self.key is not None:
                self.key.clear()
            self._set_timeout(None)
        elif state._updated or state._removed or timeout != GroupState.NO_TIMESTAMP:
            if state.exists:
                self.value.update(stored(state._value, self.state_schema))
            else:
                self.value.clear()
            self._set_timeout(None if timeout == GroupState.NO_TIMESTAMP else timeout)
        elif timer_ms is not None:  # nothing written: Spark's stored timeout stays, and times out again
            self.handle.registerTimer(timer_ms)

    def _set_timeout(self, timeout_ms: int | None) -> None:
        for timer in list(self.handle.listTimers()):
            self.handle.deleteTimer(timer)
        if timeout_ms is not None:
            self.handle.registerTimer(timeout_ms + 1)  # fires at or before the threshold: the timeout is before it


@dataclass
class GroupStateOperator(StatefulProcessorOperator):
    """``applyInPandasWithState`` over ``group_by``: a :class:`GroupStateFunction` run as a processor, the batch's
    processing time and (with a watermark) the watermark given to every call, rows and output converted as Spark's
    worker converts them."""

    conversion: PandasConversion = field(default_factory=PandasConversion)

    def signature(self, schema: T.StructType) -> dict[str, Any]:
        function = self.processor
        assert isinstance(function, GroupStateFunction)
        name = getattr(function.func, "__qualname__", type(function.func).__name__)
        return super().signature(schema) | {
            "operator": "applyInPandasWithState",
            "function": f"{getattr(function.func, '__module__', '')}.{name}",
            "state": function.state_schema.simpleString(),
            "timeout": function.timeout,
        }

    def _times(self, now_ms: int, evict_us: int) -> tuple[int, int]:
        """Every call gets the batch's processing time, and the watermark when the input has one."""
        return now_ms, evict_us // 1000 if self.event_time else GroupState.NO_TIMESTAMP

    def _frames(self, rows: pa.Table, bounds: np.ndarray) -> list[pd.DataFrame]:
        """Each group's rows as Spark's worker converts a group's on their own (a column's pandas type is of the
        group's values: integers with a null become floats in that group only), without the keys' texts."""
        texts = [c for c in self.group_by if c not in self.grouping_columns()]
        return self.conversion.group_frames(rows.drop_columns(texts) if texts else rows, bounds)

    def _groupings(self, keys: pa.Table, count: int) -> list[tuple]:
        """The key tuple as Spark's worker makes it: the first value of each key column's pandas Series, converted
        with the group (no grouping columns: the empty tuple)."""
        if not keys.num_columns:
            return [()] * count
        return self.conversion.key_tuples(keys)

    def _arrow_output(self) -> pa.Schema:
        return to_arrow_schema(self.output_schema, timezone="UTC")  # as misa's tables hold timestamps

    def _output_table(self, frames: list[pd.DataFrame]) -> pa.Table:
        """Each DataFrame the function gave converted as on its own (Spark's worker converts a task's together: a
        column of integers in one and floats in another, as an integer key's null group gives, as floats)."""
        assert isinstance(self.output_schema, T.StructType)
        return self.conversion.tables(frames, self.output_schema)


def group_state_operator(
    func: Callable[..., Iterable[pd.DataFrame]],
    group_by: list[str],
    columns: list[str],
    output_schema: T.StructType,
    state_schema: T.StructType,
    timeout: str,
    event_time: str | None = None,
    watermark_delay: str | None = None,
    conversion: PandasConversion | None = None,
    key_columns: list[str] | None = None,
) -> GroupStateOperator:
    """The operator of ``df.groupBy(*group_by).applyInPandasWithState(func, output_schema, state_schema, mode,
    timeout)`` over an input of ``columns`` (``event_time``: the column withWatermark marked, with its delay;
    ``key_columns``: the grouping columns when ``group_by`` holds their texts)."""
    texts = key_columns is not None and key_columns != group_by and timeout != GroupStateTimeout.NoTimeout
    function = GroupStateFunction(func, output_schema, state_schema, timeout, event_time is not None, columns, texts)
    return GroupStateOperator(
        function,
        group_by,
        output_schema,
        TIMEOUTS[timeout],
        event_time,
        watermark_delay,
        key_columns=key_columns,
        conversion=conversion or PandasConversion(),
    )
