"""The state's key space: every key layout and prefix of the project, in one place (DESIGN section 6).

=====================  ==================================================  ===================================
keys                   layout                                              written by
=====================  ==================================================  ===================================
window state           window end (8 B big-endian, µs) ++ group key        Aggregation (windowed),
                                                                           IntervalJoin (bucket end)
group state            group key                                           Aggregation (unwindowed), TopN
sliding-window panes   0xFE ``p`` ++ group key                             Aggregation (sliding windows)
pane timers            0xFE ``t`` ++ time (8 B big-endian, µs) ++ key      Aggregation (sliding windows)
deduplicated keys      key, or event time (8 B big-endian, µs) ++ key      Deduplicate
dedup expiry timers    0xFE ``d`` ++ expiry (8 B big-endian, µs) ++ key    Deduplicate (within watermark;
                                                                           read only: older versions' layout)
dedup expiry records   0xFE ``D`` ++ earliest expiry (8 B big-endian, µs)  Deduplicate (within watermark)
                       ++ the key that expires first
session records        0xFE ``s`` ++ group key                             SessionAggregation
session timers         0xFE ``S`` ++ earliest end (8 B big-endian) ++ key  SessionAggregation
processor state        0xFE ``v`` ++ variable ++ key                       StatefulProcessorOperator
processor timers       0xFE ``w`` ++ time (8 B big-endian, ms) ++ key      StatefulProcessorOperator
a key's timers         0xFE ``x`` ++ key                                   StatefulProcessorOperator
join rows              0xFE ``j`` ++ side ++ join key                      StreamJoin
join eviction timers   0xFE ``J`` ++ side ++ time (8 B, µs + 2^63) ++ key  StreamJoin
side table             ``s`` ++ side key                                   LookupJoin
right rows             ``r`` ++ key                                        KeyedJoin
waiting left rows      ``l`` ++ key                                        KeyedJoin
looked-up values       0xFF ``lookup:`` column 0x00 ++ key (UTF-8)         LookupAggregation
=====================  ==================================================  ===================================

A group key is, per column, a null flag byte (0x00 or 0x01) and the value
(:class:`misa.state.codec.KeyCodec`). Each job has one operator and its own store, so only the
kinds one operator writes share a store: LookupAggregation's looked-up values sit beside its
aggregation's window or group keys, which never start with 0xFF (a window end would have to be
past the year 584,000; a group key starts with its null flag), so the aggregation's range deletes
of closed windows never reach them. Sliding windows keep one pane record per group key and a timer
per record (:mod:`misa.operators.panes`), both behind 0xFE, so they meet neither.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KEY_SPACE_VERSION = 1  # the layouts above; stored in each version's operator signature, raised when one changes
SIDE_ROW = b"s"
RIGHT_ROW = b"r"
WAITING_LEFT = b"l"
LOOKUP = b"\xfflookup:"
PANE_RECORD = b"\xfep"
PANE_TIMER = b"\xfet"
DEDUP_EXPIRY = b"\xfed"
DEDUP_EXPIRIES = b"\xfeD"
SESSION_RECORD = b"\xfes"
SESSION_TIMER = b"\xfeS"
PROCESSOR_STATE = b"\xfev"
PROCESSOR_TIMER = b"\xfew"
PROCESSOR_KEY_TIMERS = b"\xfex"
JOIN_ROWS = b"\xfej"
JOIN_TIMER = b"\xfeJ"


WINDOW_PREFIX_BYTES = 8  # a window end's bytes at the head of a window state key


def window_prefix(window_end_us: int) -> bytes:
    """The key prefix shared by every key of windows ending at ``window_end_us``."""
    return int(window_end_us).to_bytes(WINDOW_PREFIX_BYTES, "big")


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix`` (whose last byte is below 0xFF): a range's end."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def lookup_prefix(column: str) -> bytes:
    """The prefix of the looked-up values of ``column``."""
    return LOOKUP + column.encode() + b"\x00"


def prefixed(prefix: bytes, keys: Sequence[bytes]) -> list[bytes]:
    """``keys``, each behind ``prefix``."""
    return joined(prefix, None, keys)


def joined(prefix: bytes, times_us: np.ndarray | None, keys: Sequence[bytes]) -> list[bytes]:
    """Per key ``prefix ++ time (8 B big-endian, when given) ++ key``, built per column, not per key: keys of
    one length as a NumPy record array, others with Arrow's element-wise join."""
    n = len(keys)
    if not n:
        return []
    width = len(keys[0])
    if len(set(map(len, keys))) == 1:
        parts = [("p", f"V{len(prefix)}")] if prefix else []
        parts += [("t", ">i8")] if times_us is not None else []
        parts += [("k", f"V{width}")] if width else []
        if not parts:
            return [b""] * n
        rows = np.empty(n, np.dtype(parts))
        if prefix:
            rows["p"] = np.void(prefix)
        if times_us is not None:
            rows["t"] = times_us
        if width:
            rows["k"] = np.frombuffer(b"".join(keys), f"V{width}")
        return split_fixed(rows.tobytes(), rows.dtype.itemsize, n)
    columns = [pa.scalar(prefix, pa.binary())]
    if times_us is not None:
        times = np.asarray(times_us).astype(">i8").tobytes()
        columns.append(
            pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), n, [None, pa.py_buffer(times)]).cast(pa.binary())
        )
    columns += [pa.array(keys, pa.binary()), pa.scalar(b"", pa.binary())]
    return pc.binary_join_element_wise(*columns).to_pylist()


def key_tails(keys: pa.Array, skip: int) -> pa.Array:
    """``keys`` without their first ``skip`` bytes (a prefix, a time), as Arrow binaries (Arrow's slice without an
    end fails on this pyarrow)."""
    return pc.binary_slice(keys, skip, (1 << 31) - 1)


def split_fixed(raw: bytes, width: int, n: int) -> list[bytes]:
    """``raw`` cut into ``n`` keys of ``width`` bytes."""
    if not width:
        return [b""] * n
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)]).to_pylist()
