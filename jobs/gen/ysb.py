"""Yahoo Streaming Benchmark input: ad events, as the benchmark's data generator makes them.

``campaigns * ads_per_campaign`` ads belong to ``campaigns`` campaigns (all ids random UUIDs from
the seeded generator); the ad-to-campaign mapping goes to ``OUT/_side/campaigns.json`` as one JSON
object ``{"<ad_id>": "<campaign_id>", ...}``. Each event picks uniformly a user and a page (pools of
100 UUIDs each), an ad, an ad type and an event type; ``ip_address`` is always ``1.2.3.4``. Events
are evenly spaced at ``rate`` per second: ``event_time = start + floor(n * 1e6 / rate) // 1000``
ms. Output files and bad records as in :mod:`jobs.gen.parts` and :mod:`jobs.gen.bad_records`.
"""

from __future__ import annotations

import json
import uuid
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

AD_TYPES = np.array(["banner", "modal", "sponsored-search", "mail", "mobile"], dtype=object)
EVENT_TYPES = np.array(["view", "click", "purchase"], dtype=object)
USERS = PAGES = 100
IP_ADDRESS = "1.2.3.4"
CAMPAIGNS_FILE = "campaigns.json"
TARGET = Target(key=("ad_id",), numeric=("event_time",))


def generate_ysb(
    out: str | Path,
    rate: float,
    seconds: int,
    seed: int = 0,
    files_per_second: float = 1.0,
    campaigns: int = 100,
    ads_per_campaign: int = 10,
    bad_fraction: float = 0.0,
    *,
    progress: bool = True,
    late: LateArrivals | None = None,
) -> dict:
    """Write ``seconds`` of ad events at ``rate`` events/s into ``out``, and the ad-to-campaign mapping.

    Deterministic for given arguments. Returns the :class:`~jobs.gen.parts.PartWriter` stats
    (``files``, ``records``, ``bad``, ``bad_by_kind``, ``first_time_ms``, ``last_time_ms``),
    ``campaigns`` and ``ads``.
    """
    validate(rate, seconds, files_per_second, bad_fraction, campaigns=campaigns, ads_per_campaign=ads_per_campaign)
    out = Path(out)
    rng = np.random.default_rng(seed)
    campaign_ids = _uuids(rng, campaigns)
    ads = _uuids(rng, campaigns * ads_per_campaign)
    write_side(out, CAMPAIGNS_FILE, json.dumps(dict(zip(ads.tolist(), np.repeat(campaign_ids, ads_per_campaign)))))
    users, pages = _uuids(rng, USERS), _uuids(rng, PAGES)
    writer = PartWriter(
        out,
        "ysb",
        seconds,
        files_per_second,
        BadRecordInjector(bad_fraction, seed, TARGET),
        "ms",
        BASE_TIME_MS,
        progress,
        late=late,
    )
    for numbers in number_chunks(record_count(rate, seconds)):
        n = len(numbers)
        times = event_times_ms(numbers, rate)
        frame = pd.DataFrame(
            {
                "user_id": users[rng.integers(0, USERS, n)],
                "page_id": pages[rng.integers(0, PAGES, n)],
                "ad_id": ads[rng.integers(0, len(ads), n)],
                "ad_type": AD_TYPES[rng.integers(0, len(AD_TYPES), n)],
                "event_type": EVENT_TYPES[rng.integers(0, len(EVENT_TYPES), n)],
                "event_time": times,
                "ip_address": IP_ADDRESS,
            }
        )
        writer.write(times, json_lines(frame))
    return {**writer.close(), "campaigns": campaigns, "ads": len(ads)}


def _uuids(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` version-4 UUID strings from ``rng``."""
    return np.array([str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(n)], dtype=object)
