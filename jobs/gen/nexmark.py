"""NEXMark input: person, auction and bid events after the reference generator (github nexmark/nexmark,
``NexmarkGenerator``, ``GeneratorConfig`` and the ``model`` generators), with its default configuration.

Event ``n`` (from 0) is a person, an auction or a bid by ``n % 50`` (proportions 1:3:46) and has
``date_time = start + floor(n * 1e6 / rate) // 1000`` ms. Person and auction ids count up from
1000 in event order. An auction's seller is, with probability 3/4, the hot seller (the first
person of the current block of 100), else one of the 1000 most recent people (the active-people
window); its category is 10..14, prices are ``round(10 ** (6 * u) * 100)`` cents, ``reserve`` is
above ``initial_bid``, and ``expires`` lies up to twice the time of 100 auctions ahead. A bid is,
with probability 1/2 (hot auction ratio 2), for the hot auction (the first of the current block of
100 auctions), else for one of the 100 most recent auctions (the in-flight window); its bidder is,
with probability 3/4, the hot bidder (the second person of the current block of 100), else an
active person; its channel is one of 4 hot channels with probability 1/2, else one of 10,000.
Strings and the ``extra`` padding (records of about 200, 500 and 100 bytes) follow the reference.

Unlike the reference, a bid or auction never names a person or auction that does not exist yet:
no id leads (``PERSON_ID_LEAD``, ``AUCTION_ID_LEAD``), the hot bidder falls back to the newest
person while the block has only one, and the bidder id is offset by 1000 once (the reference adds
it twice). Random draws are vectorized with NumPy (seeded), not the reference's per-event
``SplittableRandom``.

The bounded Q13 side table goes to ``OUT/_side/side_input.jsonl`` (``{"key": k, "value": "k"}``
for ``k < side_rows``, as the reference's ``SideInputGenerator``). Output files and bad records
as in :mod:`jobs.gen.parts` and :mod:`jobs.gen.bad_records`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from jobs.gen.bad_records import BadRecordInjector, Target
from jobs.gen.parts import (
    BASE_TIME_MS,
    LateArrivals,
    PartWriter,
    event_times_ms,
    json_lines,
    number_chunks,
    record_count,
    validate,
    write_side,
)

PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID, FIRST_AUCTION_ID, FIRST_CATEGORY_ID = 1000, 1000, 10
NUM_CATEGORIES = 5
HOT_AUCTION_RATIO, HOT_SELLERS_RATIO, HOT_BIDDERS_RATIO = 2, 4, 4  # P(hot) = 1 - 1 / ratio
HOT_BLOCK = 100  # the hot auction / seller / bidder is the first (bidder: second) of its block of 100
NUM_IN_FLIGHT_AUCTIONS, NUM_ACTIVE_PEOPLE = 100, 1000
AVG_PERSON_BYTES, AVG_AUCTION_BYTES, AVG_BID_BYTES = 200, 500, 100
US_STATES = np.array("AZ,CA,ID,OR,WA,WY".split(","), dtype=object)
US_CITIES = np.array(
    "Phoenix,Los Angeles,San Francisco,Boise,Portland,Bend,Redmond,Seattle,Kent,Cheyenne".split(","), dtype=object
)
FIRST_NAMES = np.array("Peter,Paul,Luke,John,Saul,Vicky,Kate,Julie,Sarah,Deiter,Walter".split(","), dtype=object)
LAST_NAMES = np.array("Shultz,Abrams,Spencer,White,Bartels,Walton,Smith,Jones,Noris".split(","), dtype=object)
HOT_CHANNELS = np.array(["Google", "Facebook", "Baidu", "Apple"], dtype=object)
CHANNELS = 10_000
EXTRA_POOL = 1 << 20  # the reusable random text that ``extra`` fields are cut from
MIN_STRING_LENGTH = 3
EVENT_TEMPLATES = (
    '{"event_type":0,"person":%s,"auction":null,"bid":null}',
    '{"event_type":1,"person":null,"auction":%s,"bid":null}',
    '{"event_type":2,"person":null,"auction":null,"bid":%s}',
)
SIDE_INPUT = "side_input.jsonl"
TARGET = Target(key=("person.id", "auction.id", "bid.auction"), numeric=("person.id", "auction.id", "bid.price"))


def generate_nexmark(
    out: str | Path,
    rate: float,
    seconds: int,
    seed: int = 0,
    files_per_second: float = 1.0,
    bad_fraction: float = 0.0,
    side_rows: int = 10_000,
    *,
    in_flight_auctions: int = NUM_IN_FLIGHT_AUCTIONS,
    progress: bool = True,
    late: LateArrivals | None = None,
) -> dict:
    """Write ``seconds`` of NEXMark events at ``rate`` events/s into ``out``, and the Q13 side table.

    Deterministic for given arguments. Returns the :class:`~jobs.gen.parts.PartWriter` stats
    (``files``, ``records``, ``bad``, ``bad_by_kind``, ``first_time_ms``, ``last_time_ms``), the
    events of each kind drawn (``persons``, ``auctions``, ``bids``, good or bad) and ``side_rows``.
    ``in_flight_auctions``: a bid that is not for the hot auction names one of this many most recent
    auctions (the reference's 100; more keeps old auctions read, a long-lived auction table).
    """
    validate(rate, seconds, files_per_second, bad_fraction, side_rows=side_rows, in_flight_auctions=in_flight_auctions)
    out = Path(out)
    write_side(out, SIDE_INPUT, "".join(f'{{"key":{k},"value":"{k}"}}\n' for k in range(side_rows)))
    writer = PartWriter(
        out,
        "nexmark",
        seconds,
        files_per_second,
        BadRecordInjector(bad_fraction, seed, TARGET),
        "ms",
        BASE_TIME_MS,
        progress,
        late=late,
    )
    events = Events(np.random.default_rng(seed), rate, in_flight_auctions)
    kinds = np.zeros(3, dtype=np.int64)
    for numbers in number_chunks(record_count(rate, seconds)):
        times, lines, counts = events.chunk(numbers)
        writer.write(times, lines)
        kinds += counts
    persons, auctions, bids = kinds.tolist()
    return {**writer.close(), "persons": persons, "auctions": auctions, "bids": bids, "side_rows": side_rows}


def _kind(numbers: np.ndarray) -> np.ndarray:
    """0 person, 1 auction, 2 bid."""
    offset = numbers % TOTAL_PROPORTION
    return (offset >= PERSON_PROPORTION).astype(np.int64) + (offset >= PERSON_PROPORTION + AUCTION_PROPORTION)


def last_person(numbers: np.ndarray) -> np.ndarray:
    """The newest person id (base 0) at each event; the event's own id for a person (``lastBase0PersonId``)."""
    epoch, offset = np.divmod(numbers, TOTAL_PROPORTION)
    return epoch * PERSON_PROPORTION + np.minimum(offset, PERSON_PROPORTION - 1)


def last_auction(numbers: np.ndarray) -> np.ndarray:
    """The newest auction id (base 0) at each event; the event's own id for an auction (``lastBase0AuctionId``)."""
    epoch, offset = np.divmod(numbers, TOTAL_PROPORTION)
    in_epoch = np.clip(offset - PERSON_PROPORTION, -1, AUCTION_PROPORTION - 1)  # -1: before this epoch's first
    return epoch * AUCTION_PROPORTION + in_epoch


class Events:
    """Draws the events of given event numbers."""

    def __init__(self, rng: np.random.Generator, rate: float, in_flight_auctions: int = NUM_IN_FLIGHT_AUCTIONS):
        self.rng, self.rate, self.in_flight_auctions = rng, rate, in_flight_auctions
        self.pool = _letters(rng, EXTRA_POOL)
        self.hot_urls = self._urls(len(HOT_CHANNELS))
        urls = self._urls(CHANNELS)
        tagged = rng.integers(0, 10, CHANNELS) > 0
        self.channel_urls = np.array(
            [
                url + f"&channel_id={_reversed_bits(i)}" if tag else url
                for i, (url, tag) in enumerate(zip(urls, tagged.tolist()))
            ],
            dtype=object,
        )

    def chunk(self, numbers: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Event times (ms), JSON lines in event order and the count of each kind."""
        times = event_times_ms(numbers, self.rate)
        kinds = _kind(numbers)
        lines = np.empty(len(numbers), dtype=object)
        for kind, draw in enumerate((self._persons, self._auctions, self._bids)):
            chosen = kinds == kind
            if chosen.any():
                lines[chosen] = [
                    EVENT_TEMPLATES[kind] % line for line in json_lines(draw(numbers[chosen], times[chosen]))
                ]
        return times, lines.tolist(), np.bincount(kinds, minlength=3)

    def _persons(self, numbers: np.ndarray, times: np.ndarray) -> pd.DataFrame:
        n, rng = len(numbers), self.rng
        name = FIRST_NAMES[rng.integers(0, len(FIRST_NAMES), n)] + " " + LAST_NAMES[rng.integers(0, len(LAST_NAMES), n)]
        email = _strings(rng, n, 7) + "@" + _strings(rng, n, 5) + ".com"
        card = [" ".join(f"{d:04d}" for d in row) for row in rng.integers(0, 10_000, (n, 4)).tolist()]
        city, state = US_CITIES[rng.integers(0, len(US_CITIES), n)], US_STATES[rng.integers(0, len(US_STATES), n)]
        size = 8 + sum(_lengths(column) for column in (name, email, card, city, state))
        return pd.DataFrame(
            {
                "id": last_person(numbers) + FIRST_PERSON_ID,
                "name": name,
                "email_address": email,
                "credit_card": card,
                "city": city,
                "state": state,
                "date_time": times,
                "extra": self._extra(size, AVG_PERSON_BYTES),
            }
        )

    def _auctions(self, numbers: np.ndarray, times: np.ndarray) -> pd.DataFrame:
        n, rng = len(numbers), self.rng
        people = last_person(numbers)
        seller = np.where(
            rng.integers(0, HOT_SELLERS_RATIO, n) > 0, people // HOT_BLOCK * HOT_BLOCK, self._active_person(people)
        )
        category = FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, n)
        initial_bid = _prices(rng, n)
        # average length: the time until NUM_IN_FLIGHT_AUCTIONS more auctions have been drawn
        ahead = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
        horizon = event_times_ms(numbers + ahead, self.rate) - times
        expires = times + 1 + rng.integers(0, np.maximum(horizon * 2, 1))
        name, description = _strings(rng, n, 20), _strings(rng, n, 100)
        reserve = initial_bid + _prices(rng, n)
        size = 8 + _lengths(name) + _lengths(description) + 40
        return pd.DataFrame(
            {
                "id": last_auction(numbers) + FIRST_AUCTION_ID,
                "item_name": name,
                "description": description,
                "initial_bid": initial_bid,
                "reserve": reserve,
                "date_time": times,
                "expires": expires,
                "seller": seller + FIRST_PERSON_ID,
                "category": category,
                "extra": self._extra(size, AVG_AUCTION_BYTES),
            }
        )

    def _bids(self, numbers: np.ndarray, times: np.ndarray) -> pd.DataFrame:
        n, rng = len(numbers), self.rng
        newest = last_auction(numbers)
        oldest = np.maximum(newest - self.in_flight_auctions, 0)
        auction = np.where(
            rng.integers(0, HOT_AUCTION_RATIO, n) > 0,
            newest // HOT_BLOCK * HOT_BLOCK,
            oldest + rng.integers(0, newest - oldest + 1),
        )
        people = last_person(numbers)
        hot_bidder = np.minimum(people // HOT_BLOCK * HOT_BLOCK + 1, people)
        bidder = np.where(rng.integers(0, HOT_BIDDERS_RATIO, n) > 0, hot_bidder, self._active_person(people))
        price = _prices(rng, n)
        hot = rng.integers(0, 2, n) > 0
        hot_channel, other = rng.integers(0, len(HOT_CHANNELS), n), rng.integers(0, CHANNELS, n)
        channel = np.where(hot, HOT_CHANNELS[hot_channel], "channel-" + other.astype(str).astype(object))
        url = np.where(hot, self.hot_urls[hot_channel], self.channel_urls[other])
        return pd.DataFrame(
            {
                "auction": auction + FIRST_AUCTION_ID,
                "bidder": bidder + FIRST_PERSON_ID,
                "price": price,
                "channel": channel,
                "url": url,
                "date_time": times,
                "extra": self._extra(np.full(n, 32), AVG_BID_BYTES),
            }
        )

    def _active_person(self, people: np.ndarray) -> np.ndarray:
        """A random person among the ``NUM_ACTIVE_PEOPLE`` newest (``nextBase0PersonId`` without a lead)."""
        active = np.minimum(people + 1, NUM_ACTIVE_PEOPLE)
        return people + 1 - active + self.rng.integers(0, active)

    def _extra(self, size: np.ndarray, average: int) -> np.ndarray:
        """Padding that brings the record to about ``average`` bytes (``nextExtra``)."""
        desired = np.maximum(average - size, 0)
        delta = np.floor(desired * 0.2 + 0.5).astype(np.int64)
        length = desired - delta + self.rng.integers(0, np.maximum(2 * delta, 1))
        start = self.rng.integers(0, len(self.pool) - length)
        return np.array([self.pool[a:b] for a, b in zip(start.tolist(), (start + length).tolist())], dtype=object)

    def _urls(self, n: int) -> np.ndarray:
        """``https://www.nexmark.com/<s>/<s>/<s>/item.htm?query=1`` (``getBaseUrl``)."""
        parts = [_strings(self.rng, n, 5, "_") for _ in range(3)]
        return "https://www.nexmark.com/" + parts[0] + "/" + parts[1] + "/" + parts[2] + "/item.htm?query=1"


def _letters(rng: np.random.Generator, n: int, special: str | None = None) -> str:
    """``n`` random lower-case letters; with ``special``, each character is it with probability 1/13."""
    codes = rng.integers(ord("a"), ord("z") + 1, n, dtype=np.uint8)
    if special is not None:
        codes[rng.integers(0, 13, n) == 0] = ord(special)
    return codes.tobytes().decode("ascii")


def _strings(rng: np.random.Generator, n: int, max_length: int, special: str = " ") -> np.ndarray:
    """``n`` random strings of 3 .. ``max_length - 1`` characters, trimmed (``nextString``)."""
    lengths = MIN_STRING_LENGTH + rng.integers(0, max_length - MIN_STRING_LENGTH, n)
    ends = np.cumsum(lengths)
    text = _letters(rng, int(ends[-1]) if n else 0, special)
    return np.array([text[a:b].strip() for a, b in zip((ends - lengths).tolist(), ends.tolist())], dtype=object)


def _lengths(column: np.ndarray | list[str]) -> np.ndarray:
    return np.fromiter(map(len, column), dtype=np.int64, count=len(column))


def _prices(rng: np.random.Generator, n: int) -> np.ndarray:
    """Log-uniform prices in cents, 100 .. 10**8 (``PriceGenerator.nextPrice``)."""
    return np.floor(10.0 ** (rng.random(n) * 6.0) * 100.0 + 0.5).astype(np.int64)


def _reversed_bits(i: int) -> int:
    """``Math.abs(Integer.reverse(i))``."""
    value = int(f"{i:032b}"[::-1], 2)
    return abs(value - (1 << 32) if value >= 1 << 31 else value)
