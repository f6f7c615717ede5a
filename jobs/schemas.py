"""The input schemas of the Linear Road, NEXMark and YSB jobs, as ``misa gen lr|nexmark|ysb`` writes them.

Ids and times are LongType, small integers IntegerType, text StringType; field order is the
generators' key order.
"""

from __future__ import annotations

from pyspark.sql.types import DataType, IntegerType, LongType, StringType, StructField, StructType


def _struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in fields])


LONG, INT, STRING = LongType(), IntegerType(), StringType()

# Linear Road position reports (type 0): time in seconds since the start, pos in 0..527999.
LR_REPORTS = _struct(
    ("type", INT),
    ("time", LONG),
    ("vid", LONG),
    ("spd", INT),
    ("xway", INT),
    ("lane", INT),
    ("dir", INT),
    ("seg", INT),
    ("pos", INT),
)

NEXMARK_PERSON = _struct(
    ("id", LONG),
    ("name", STRING),
    ("email_address", STRING),
    ("credit_card", STRING),
    ("city", STRING),
    ("state", STRING),
    ("date_time", LONG),
    ("extra", STRING),
)
NEXMARK_AUCTION = _struct(
    ("id", LONG),
    ("item_name", STRING),
    ("description", STRING),
    ("initial_bid", LONG),
    ("reserve", LONG),
    ("date_time", LONG),
    ("expires", LONG),
    ("seller", LONG),
    ("category", LONG),
    ("extra", STRING),
)
NEXMARK_BID = _struct(
    ("auction", LONG),
    ("bidder", LONG),
    ("price", LONG),
    ("channel", STRING),
    ("url", STRING),
    ("date_time", LONG),
    ("extra", STRING),
)
# One event: event_type 0 person, 1 auction, 2 bid; the other two structs are null. Times are epoch ms.
NEXMARK_EVENTS = _struct(
    ("event_type", INT), ("person", NEXMARK_PERSON), ("auction", NEXMARK_AUCTION), ("bid", NEXMARK_BID)
)
# The bounded Q13 side table (OUT/_side/side_input.jsonl), joined on bid.auction % its row count.
NEXMARK_SIDE_INPUT = _struct(("key", LONG), ("value", STRING))

# Yahoo Streaming Benchmark ad events; event_time is epoch ms.
YSB_EVENTS = _struct(
    ("user_id", STRING),
    ("page_id", STRING),
    ("ad_id", STRING),
    ("ad_type", STRING),
    ("event_type", STRING),
    ("event_time", LONG),
    ("ip_address", STRING),
)
