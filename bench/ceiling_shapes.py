"""The shapes of ``misa bench ceiling``: each job's real operator, a preloaded state, deltas with Spark's columns.

A shape holds ``keys`` state entries in a steady state: each key was last updated at an event time spread
evenly over the ``lifetime`` a key lives without updates, and each measured batch advances event time by
``lifetime * deltas / keys``, so the keys the batch's watermark evicts are about as many as its deltas touch
(the state neither grows nor empties). The deltas have exactly the columns and Arrow types the operator's
Spark plan gives (``tests/bench/test_ceiling.py`` compares them with Spark's), drawn uniformly
over the key space. The shapes run the operator alone, with no Spark query, so there is no Spark output to compare
theirs with: ``misa bench ceiling`` compares misa with itself only (see its docstring).

=============  ===================================================================================
cm2-update     Cluster Monitoring CM2: AVG(cpu_request) by job_id, 30 s windows every 1 s, update mode
cm2-append     the same in append mode (each live key is visited at each window close to emit)
lr2            Linear Road LR2: each report joined with the vehicle's reports of the 30 s before
q20            NEXMark Q20: bids joined with their auction (category 10), auctions kept in state
ysb            YSB: views per campaign in 10 s windows, the ad -> campaign lookup served by the state
dedup          ``dropDuplicatesWithinWatermark("k")`` (from_query's Deduplicate): a key per id, expiring 10 s on
session        ``groupBy(session_window(t, "5 seconds"), "k").count()`` in append mode (SessionAggregation)
join           a stream joined with itself on ``k`` within 10 s (from_query's StreamJoin): a row per key and side
=============  ===================================================================================
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.cluster_monitoring import QUERIES as CM_QUERIES
from jobs.linear_road import QUERIES as LR_QUERIES
from jobs.nexmark import Q20_CATEGORY, q20_operator
from jobs.schemas import NEXMARK_AUCTION, NEXMARK_BID
from jobs.ysb import campaign_views
from misa.config_forms import parse_seconds
from misa.operators.aggregation import Agg
from misa.operators.base import MAX_EVENT, PANE_END, ROWS, WINDOW_END, WINDOW_START
from misa.operators.dedup import Deduplicate
from misa.operators.interval_join import EVENT_US
from misa.operators.lookup_aggregation import LookupAggregation
from misa.operators.panes import PaneRecords, Panes
from misa.operators.session_records import Sessions
from misa.operators.session_records import encode as encode_sessions
from misa.operators.sessions import END as SESSION_END
from misa.operators.sessions import START as SESSION_START
from misa.operators.sessions import SessionAggregation
from misa.operators.stream_join import SIDE_BYTES, WHOLE, JoinSide, StreamJoin, stored_rows
from misa.state.codec import AGG_CELLS, KeyCodec
from misa.state.keys import (
    DEDUP_EXPIRY,
    JOIN_ROWS,
    JOIN_TIMER,
    PANE_RECORD,
    PANE_TIMER,
    RIGHT_ROW,
    SESSION_RECORD,
    SESSION_TIMER,
    joined,
    lookup_prefix,
    prefixed,
)
from misa.state.record_codec import RecordCodec

SECOND = 1_000_000
START_US = 1_700_000_000 * SECOND  # event time of the newest preloaded update
DELAY = "10s"  # the jobs' default watermark delay
WATERMARK = {"watermark_us": START_US - 10 * SECOND, "max_event_us": START_US}  # after the preload
SHAPES = ("cm2-update", "cm2-append", "lr2", "q20", "ysb", "dedup", "session", "join")
ADS_PER_CAMPAIGN = 10  # YSB's


def _job_args(output_mode: str) -> argparse.Namespace:
    return argparse.Namespace(watermark_delay=DELAY, output_mode=output_mode)


def _split(raw: bytes, width: int) -> list[bytes]:
    return [raw[i : i + width] for i in range(0, len(raw), width)]


def _int_keys(ids: np.ndarray, prefix: bytes, times_us: np.ndarray | None = None) -> list[bytes]:
    """``prefix ++ time (8 B big-endian, if given) ++ group key`` of one non-null integer column (:class:`KeyCodec`'s
    layout): the preload builds its keys itself, so that it runs unchanged against earlier releases."""
    parts = [("p", f"V{len(prefix)}")] + ([("t", ">i8")] if times_us is not None else []) + [("n", "u1"), ("v", ">i8")]
    rows = np.zeros(len(ids), np.dtype(parts))
    rows["p"], rows["v"] = np.void(prefix), ids
    if times_us is not None:
        rows["t"] = times_us
    return _split(rows.tobytes(), rows.dtype.itemsize)


@dataclass
class Shape(ABC):
    """One job's operator with a preloaded state and a stream of deltas (see the module's docstring)."""

    name: str
    keys: int  # state entries the preload writes (and the batches keep)
    deltas_per_batch: int
    lifetime_us: int  # how long (event time) a key lives without updates
    seed: int = 7

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.step_us = max(1, self.lifetime_us * self.deltas_per_batch // self.keys)
        self.operator = self.make_operator()

    # -- each shape's own
    @abstractmethod
    def make_operator(self) -> Any:
        """The job's operator, as ``jobs/`` builds it."""

    @abstractmethod
    def state_of(self, ids: np.ndarray, t_us: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        """The state entries of keys ``ids`` last updated at ``t_us`` (keys, values)."""

    @abstractmethod
    def deltas(self, ids: np.ndarray, t_us: np.ndarray) -> pa.Table:
        """A batch's deltas of keys ``ids`` at event times ``t_us``, with the operator's columns."""

    # -- shared
    @property
    def metadata(self) -> dict[str, Any]:
        """The operator's metadata at the preloaded state (by default the watermark the newest update gives)."""
        return WATERMARK

    @staticmethod
    def aggregation_metadata(aggregation: Any, cells: list[str]) -> dict[str, Any]:
        """An aggregation's metadata at the preloaded state: the watermark, its layout and value cells."""
        return {**WATERMARK, "layout": aggregation._layout, "values": cells}

    def preload(self, chunk: int = 1_000_000) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """The preloaded state in chunks of (keys, values)."""
        for begin in range(0, self.keys, chunk):
            ids = np.arange(begin, min(self.keys, begin + chunk), dtype=np.int64)
            age = (ids * 7919 % self.keys) * (self.lifetime_us - SECOND) // self.keys  # spread, not ordered by id
            yield self.state_of(ids, START_US - age)

    def batch(self, number: int) -> pa.Table:
        """Measured batch ``number`` (from 0): deltas of keys drawn uniformly, event time ``step_us`` on."""
        begin = START_US + 1 + number * self.step_us
        t = np.sort(self.rng.integers(begin, begin + self.step_us, self.deltas_per_batch))
        return self.deltas(self.rng.integers(0, self.keys, self.deltas_per_batch), t)


class Cm2(Shape):
    """CM2's pane records (one pane each) and timers; deltas per (pane, job_id)."""

    output_mode = "update"

    def make_operator(self) -> Any:
        return CM_QUERIES["cm2"].operator(_job_args(self.output_mode))

    @property
    def metadata(self) -> dict[str, Any]:
        return self.aggregation_metadata(self.operator, ["float64"])

    def state_of(self, ids: np.ndarray, t_us: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        panes = self.operator._panes
        windows = panes.windows
        ends = (t_us // windows.pane_us + 1) * windows.pane_us
        cells = np.zeros((len(ids), 2), np.int64)
        cells[:, 0] = np.full(len(ids), 0.5).view(np.int64)
        cells[:, 1] = 1
        watermark = WATERMARK["watermark_us"]
        if panes.append:
            timers = np.maximum(windows.first_window_end(ends), windows.next_window_end(watermark))
        else:
            timers = windows.last_window_end(ends)
        records = PaneRecords(AGG_CELLS).encode(len(ids), timers, Panes(np.arange(len(ids)), ends, cells))
        keys = _int_keys(ids, PANE_RECORD) + _int_keys(ids, PANE_TIMER, timers)
        return keys, records + [b""] * len(ids)  # type: ignore[operator]

    def deltas(self, ids: np.ndarray, t_us: np.ndarray) -> pa.Table:
        pane = self.operator._panes.windows.pane_us
        ends = (t_us // pane + 1) * pane
        frame = pa.table({PANE_END: ends, "job_id": ids, MAX_EVENT: t_us})
        frame = frame.group_by([PANE_END, "job_id"]).aggregate([(MAX_EVENT, "max"), (MAX_EVENT, "count")])
        n = frame.num_rows
        return pa.table(
            {
                PANE_END: frame[PANE_END],
                "job_id": frame["job_id"],
                ROWS: frame[f"{MAX_EVENT}_count"],
                MAX_EVENT: frame[f"{MAX_EVENT}_max"],
                "_v0": pa.array(self.rng.random(n)),
                "_c0": frame[f"{MAX_EVENT}_count"],
            }
        )


class Cm2Append(Cm2):
    output_mode = "append"


class Lr2(Shape):
    """LR2's buckets (one row each); deltas are position reports."""

    def make_operator(self) -> Any:
        return LR_QUERIES["lr2"].operator(_job_args("append"))

    def state_of(self, ids: np.ndarray, t_us: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        op = self.operator
        ends = (t_us // op.interval_us + 1) * op.interval_us
        rows = self.deltas(ids, t_us)
        codec = KeyCodec([rows.schema.field("vid")], windowed=True)
        return codec.encode(ends, [rows["vid"].combine_chunks()]), _split(op._pack(rows).tobytes(), op._record.itemsize)

    def deltas(self, ids: np.ndarray, t_us: np.ndarray) -> pa.Table:
        n = len(ids)
        return pa.table(
            {
                "vid": pa.array(ids, pa.int64()),
                EVENT_US: pa.array(t_us, pa.int64()),
                "time": pa.array(t_us // SECOND, pa.int64()),
                "spd": pa.array(self.rng.integers(0, 100, n), pa.int32()),
                "seg": pa.array(self.rng.integers(0, 100, n), pa.int32()),
            }
        )


def _arrow_struct(spark_struct: Any) -> pa.StructType:
    types = {"LongType()": pa.int64(), "IntegerType()": pa.int32(), "StringType()": pa.string()}
    return pa.struct([pa.field(f.name, types[repr(f.dataType)]) for f in spark_struct.fields])


AUCTION, BID = _arrow_struct(NEXMARK_AUCTION), _arrow_struct(NEXMARK_BID)


class Q20(Shape):
    """Q20's auctions (a tenth in category 10); a batch is nine bids (of stored auctions) to one new auction."""

    def make_operator(self) -> Any:
        return q20_operator(argparse.Namespace())

    @property
    def metadata(self) -> dict[str, Any]:
        return {"dropped_rows": 0}

    def _auctions(self, ids: np.ndarray, t_us: np.ndarray) -> pa.StructArray:
        n = len(ids)
        text = pa.array(np.char.add("item-", ids.astype(str)).astype(object), pa.string())
        columns = {
            "id": pa.array(ids, pa.int64()),
            "item_name": text,
            "description": text,
            "initial_bid": pa.array(self.rng.integers(1, 1000, n)),
            "reserve": pa.array(self.rng.integers(1, 1000, n)),
            "date_time": pa.array(t_us // 1000),
            "expires": pa.array(t_us // 1000 + 3_600_000),
            "seller": pa.array(self.rng.integers(0, 10_000, n)),
            "category": pa.array(np.where(ids % 10 == 0, Q20_CATEGORY, ids % 10 + 10)),
            "extra": text,
        }
        return pa.StructArray.from_arrays(list(columns.values()), fields=list(AUCTION))

    def state_of(self, ids: np.ndarray, t_us: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        op = self.operator
        auctions = pa.Table.from_struct_array(self._auctions(ids, t_us))
        codec = RecordCodec(auctions.schema)
        keys = prefixed(
            RIGHT_ROW, KeyCodec([pa.field("id", pa.int64())], windowed=False).encode(None, [auctions["id"]])
        )
        return keys, codec.encode(op._stored_form(auctions), np.ones(len(ids), np.int64))

    def deltas(self, ids: np.ndarray, t_us: np.ndarray) -> pa.Table:
        n = len(ids)
        new = np.arange(n) % 10 == 9
        fresh = self.keys + self.rng.integers(0, 1 << 40, int(new.sum()))  # auctions never seen
        bids = pa.StructArray.from_arrays(
            [
                pa.array(ids),
                pa.array(self.rng.integers(0, 100_000, n)),
                pa.array(self.rng.integers(1, 10_000, n)),
                pa.array(["channel"] * n, pa.string()),
                pa.array(["https://example.com/bid"] * n, pa.string()),
                pa.array(t_us // 1000),
                pa.array([""] * n, pa.string()),
            ],
            fields=list(BID),
            mask=pa.array(new),
        )
        auctions = np.zeros(n, np.int64)
        auctions[new] = fresh
        auction_rows = self._auctions(auctions, t_us)
        auction_rows = pa.StructArray.from_arrays(auction_rows.flatten(), fields=list(AUCTION), mask=pa.array(~new))
        return pa.table({"bid": bids, "auction": auction_rows})


class Ysb(Shape):
    """YSB's ad -> campaign entries (one per ad); deltas per (10 s window, ad)."""

    def make_operator(self) -> Any:
        return LookupAggregation("ad_id", campaign_views(_job_args("update")), self._lookup)

    @property
    def metadata(self) -> dict[str, Any]:
        return {**self.aggregation_metadata(self.operator.aggregation, ["int64"]), "missing_rows": 0}

    @staticmethod
    def _lookup(ads: Any) -> list[str | None]:
        return [f"campaign-{int(a[3:]) // ADS_PER_CAMPAIGN}" for a in ads]

    def state_of(self, ids: np.ndarray, t_us: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        ads = np.char.add("ad-", ids.astype(str))
        prefix = lookup_prefix("ad_id")
        return [prefix + a.encode() for a in ads.tolist()], [c.encode() for c in self._lookup(ads.tolist())]

    def deltas(self, ids: np.ndarray, t_us: np.ndarray) -> pa.Table:
        size = 10 * SECOND
        ends = (t_us // size + 1) * size
        frame = pa.table({WINDOW_END: ends, "ad": ids, MAX_EVENT: t_us})
        frame = frame.group_by([WINDOW_END, "ad"]).aggregate([(MAX_EVENT, "max"), (MAX_EVENT, "count")])
        ads = np.char.add("ad-", frame["ad"].to_numpy().astype(str)).astype(object)
        count = frame[f"{MAX_EVENT}_count"]
        return pa.table(
            {
                WINDOW_START: pc.subtract(frame[WINDOW_END], size),
                WINDOW_END: frame[WINDOW_END],
                "ad_id": pa.array(ads, pa.string()),
                ROWS: count,
                MAX_EVENT: frame[f"{MAX_EVENT}_max"],
                "_v0": count,
                "_c0": count,
            }
        )


class Dedup(Shape):
    """dropDuplicatesWithinWatermark: each key's expiry and its timer; deltas are the stream's rows."""

    def make_operator(self) -> Any:
        return Deduplicate(["k"], event_time="event_time", watermark_delay=DELAY, within_watermark=True)

    def state_of(self, ids: np.ndarray, t_us: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        keys = _int_keys(ids, b"")
        expiries = t_us + 10 * SECOND
        timers = joined(DEDUP_EXPIRY, expiries, keys)
        return keys + timers, [int(e).to_bytes(8, "big") for e in expiries] + [b"\x01"] * len(keys)

    def deltas(self, ids: np.ndarray, t_us: np.ndarray) -> pa.Table:
        return pa.table(
            {
                "k": pa.array(ids, pa.int64()),
                "t": pa.array(t_us // 1000, pa.int64()),
                "event_time": pa.array(t_us, pa.timestamp("us", "UTC")),
            }
        )


class Session(Shape):
    """Session windows (gap 5 s, count per key): one open session per key and its timer; deltas per (key, row
    session) of the batch, as Spark's partial aggregation gives them."""

    gap_us = 5 * SECOND

    def make_operator(self) -> Any:
        return SessionAggregation(["k"], [Agg("count", "count", "t")], "session_window", "event_time", DELAY)

    def state_of(self, ids: np.ndarray, t_us: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        groups = _int_keys(ids, b"")
        ends = t_us + self.gap_us
        ones = np.ones((len(ids), 2), np.int64)  # the count's cells: one row
        records = encode_sessions(Sessions(np.arange(len(ids)), t_us, ends, ones), len(ids))
        keys = prefixed(SESSION_RECORD, groups) + joined(SESSION_TIMER, ends, groups)
        return keys, records + records  # each timer holds a copy of its record

    def deltas(self, ids: np.ndarray, t_us: np.ndarray) -> pa.Table:
        ones = pa.array(np.ones(len(ids), np.int64))
        return pa.table(
            {
                "k": pa.array(ids, pa.int64()),
                SESSION_START: pa.array(t_us, pa.int64()),
                SESSION_END: pa.array(t_us + self.gap_us, pa.int64()),
                ROWS: ones,
                MAX_EVENT: pa.array(t_us, pa.int64()),
                "_v0": ones,
                "_c0": ones,
            }
        )


class Join(Shape):
    """A stream joined with itself on k, b.t BETWEEN a.t - 10 s AND a.t: each key's one stored row per side and
    their timers; deltas are both sides' rows (half each)."""

    def make_operator(self) -> Any:
        delay = int(parse_seconds(DELAY) * 1000)
        return StreamJoin(1, JoinSide("l1", delay, (), 0), JoinSide("r1", delay, (), -10_001))

    def state_of(self, ids: np.ndarray, t_us: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        groups = _int_keys(ids, b"")
        keys, values = [], []
        for side, prefix in zip(SIDE_BYTES, "lr"):
            row = pa.StructArray.from_arrays(
                [pa.array(ids, pa.int64()), pa.array(t_us, pa.timestamp("us", "UTC"))], [f"{prefix}0", f"{prefix}1"]
            )
            records = stored_rows(row.type)
            stored = pa.Table.from_arrays([pa.array(t_us, pa.int64()), *row.flatten()], schema=records.schema)
            keys += prefixed(JOIN_ROWS + side, groups)
            values += records.encode(stored, np.ones(len(ids), np.int64))
            keys += [JOIN_TIMER + side + (int(t) + (1 << 63)).to_bytes(8, "big") + g for t, g in zip(t_us, groups)]
            values += [WHOLE] * len(ids)  # each key's one row: its timer is the latest
        return keys, values

    def deltas(self, ids: np.ndarray, t_us: np.ndarray) -> pa.Table:
        side = np.arange(len(ids)) % 2
        times = pa.array(t_us, pa.timestamp("us", "UTC"))
        rows = {p: pa.StructArray.from_arrays([pa.array(ids, pa.int64()), times], [f"{p}0", f"{p}1"]) for p in "lr"}
        none = [pa.nulls(len(ids), rows[p].type) for p in "lr"]
        return pa.table(
            {
                "_side": pa.array(side, pa.int32()),
                "_k0": pa.array(ids, pa.int64()),
                "_l": pc.if_else(pa.array(side == 0), rows["l"], none[0]),
                "_r": pc.if_else(pa.array(side == 1), rows["r"], none[1]),
            }
        )


LIFETIMES_S = {"cm2-update": 40, "cm2-append": 40, "lr2": 40, "q20": 40, "ysb": 20, "dedup": 10, "session": 15}
LIFETIMES_S |= {"join": 20}
KINDS: dict[str, Callable[..., Shape]] = {
    "cm2-update": Cm2,
    "cm2-append": Cm2Append,
    "lr2": Lr2,
    "q20": Q20,
    "ysb": Ysb,
    "dedup": Dedup,
    "session": Session,
    "join": Join,
}


def shape(name: str, keys: int, deltas_per_batch: int, seed: int = 7) -> Shape:
    """The shape called ``name`` with ``keys`` state entries and batches of ``deltas_per_batch`` deltas."""
    return KINDS[name](name, keys, deltas_per_batch, LIFETIMES_S[name] * SECOND, seed)
