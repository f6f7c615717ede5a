"""What a new state host must redo to stand where a lost one stood: the requests that changed the partitions since
the newest version every partition made durable, and how to send each request's rows again.

The driver records every request that changes a partition's state (:data:`CHANGES`) with each partition's arguments,
in order. A version's requests end with its ``commit``; once every partition has ack 2 of a version
(:meth:`HostJournal.durable`), its requests are dropped, so the journal holds at most the few batches the commit
pipeline has in flight. A new host loads its partition's newest durable version, but none newer than the last
commit recorded before the request its host was lost in (:meth:`HostJournal.settled`: a synchronous commit may have
made its version durable before the host died), then redoes the requests after it (:meth:`HostJournal.after`).
Rows the hosts took from a sending (an :class:`~misa.hosts.server.Inbox`) are sent again from where they came from:
the batch's DataFrame (Spark recomputes it from the batch's offsets) or the driver's table (:class:`Resend`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa
from pyspark.sql import DataFrame

from misa.hosts.server import Inbox
from misa.parallel.routing import KeysOf

#: The requests that change a partition's state, in the order a batch makes them.
CHANGES = frozenset({"follow_watermark", "apply", "observe", "no_data_batch", "commit", "set_prefetching"})
COMMIT = "commit"


@dataclass(frozen=True)
class Resend:
    """Where a sending's rows came from: a DataFrame the tasks sent (``latest_of``: the column whose maximum they
    report), or a table the driver split."""

    rows: DataFrame | pa.Table
    keys_of: KeysOf
    latest_of: str | None = None


@dataclass(frozen=True)
class Request:
    """One recorded request: its name and each partition's arguments."""

    name: str
    args: list[tuple[Any, ...]]

    @property
    def version(self) -> int | None:
        """The version a ``commit`` hands over (None for other requests)."""
        return int(self.args[0][0]) if self.name == COMMIT else None


@dataclass
class HostJournal:
    """The requests since ``base`` (the newest version durable in every partition), the claim every partition got
    at start, and the sendings the recorded requests name."""

    base: int | None = None  # None: no version adopted yet (the start's recovery is still running)
    claim: tuple[Any, ...] | None = None
    requests: list[Request] = field(default_factory=list)
    sendings: dict[str, Resend] = field(default_factory=dict)

    def record(self, name: str, args: list[tuple[Any, ...]]) -> Request | None:
        """Keep ``name``'s request if it changes the partitions (the claim and an adoption reset the journal)."""
        if name == "claim":
            self.claim = args[0]
        if name == "adopt":
            self.base, self.requests = int(args[0][0]), []
        if name not in CHANGES:
            return None
        request = Request(name, list(args))
        self.requests.append(request)
        return request

    def sent(self, token: str, resend: Resend) -> None:
        """Remember where sending ``token``'s rows came from."""
        self.sendings[token] = resend

    def durable(self, version: int) -> None:
        """Every partition has ack 2 of ``version``: drop the requests up to its commit, and the sendings no kept
        request names."""
        commits = [i for i, r in enumerate(self.requests) if r.version is not None and r.version <= version]
        if commits:
            del self.requests[: commits[-1] + 1]
        self.base = version if self.base is None else max(self.base, version)
        named = {a.token for r in self.requests for args in r.args for a in args if isinstance(a, Inbox)}
        self.sendings = {t: s for t, s in self.sendings.items() if t in named}

    def settled(self, before: Request | None = None) -> int | None:
        """The newest version whose commit is recorded before ``before`` (None: of all), else ``base``: the newest a
        new host may load. A newer durable version was made by the commit being answered when the host was lost;
        loaded, its batch would be applied twice, and that batch's output is made again only by its ``apply``."""
        settled = self.base
        for request in self.requests:
            if request is before:
                break
            if request.version is not None:
                settled = request.version
        return settled

    def after(self, version: int, before: Request | None = None) -> list[Request]:
        """The requests to redo on a partition loaded at ``version``: those of later versions, up to ``before``
        (the request being made when the host was lost; None: all)."""
        kept: list[Request] = []
        segment: list[Request] = []
        for request in self.requests:
            if request is before:
                break
            segment.append(request)
            if request.version is not None:
                if request.version > version:
                    kept += segment
                segment = []
        return kept + segment


def renewed(args: tuple[Any, ...], resend: Callable[[Inbox], Inbox]) -> tuple[Any, ...]:
    """``args`` with every inbox reference replaced by ``resend``'s (its rows sent again to the new host)."""
    return tuple(resend(a) if isinstance(a, Inbox) else a for a in args)
