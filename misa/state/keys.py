"""The state's key space: every key layout and prefix of the project, in one place (DESIGN section 6).

=====================  ==================================================  ===================================
keys                   layout                                              written by
=====================  ==================================================  ===================================
window state           window end (8 B big-endian, µs) ++ group key        Aggregation (windowed),
                                                                           IntervalJoin (bucket end)
group state            group key                                           Aggregation (unwindowed), TopN
sliding-window panes   0xFE ``p`` ++ group key                             Aggregation (sliding windows)
pane timers            0xFE ``t`` ++ time (8 B big-endian, µs) ++ key      Aggregation (sliding windows)
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

KEY_SPACE_VERSION = 1  # the layouts above; stored in each version's operator signature, raised when one changes
SIDE_ROW = b"s"
RIGHT_ROW = b"r"
WAITING_LEFT = b"l"
LOOKUP = b"\xfflookup:"
PANE_RECORD = b"\xfep"
PANE_TIMER = b"\xfet"


def window_prefix(window_end_us: int) -> bytes:
    """The key prefix shared by every key of windows ending at ``window_end_us``."""
    return int(window_end_us).to_bytes(8, "big")


def lookup_prefix(column: str) -> bytes:
    """The prefix of the looked-up values of ``column``."""
    return LOOKUP + column.encode() + b"\x00"


def prefixed(prefix: bytes, keys: Sequence[bytes]) -> list[bytes]:
    """``keys``, each behind ``prefix``."""
    return [prefix + k for k in keys]
