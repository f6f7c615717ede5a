"""Calls to state hosts that tell a busy host from a lost one: each call runs on a thread of its own, and while it
runs every host that has not answered is sent a ``ping`` (answered at once, also during a long request). A host
whose call fails, or that does not answer a ping within ``spark.misa.state.livenessTimeout``, is lost."""

from __future__ import annotations

import pickle
import threading
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, TypeVar

import pyarrow.flight as flight

from misa.hosts.host_task import HostAddress
from misa.hosts.server import PING, REQUEST, Output, call_options

K = TypeVar("K", bound=Hashable)
Reply = tuple[str, Any]  # ("ok", value) or ("error", the exception the host raised)


class HostLost(Exception):
    """A host (``index``: its partition) was lost (``why``) during a request."""

    def __init__(self, index: int, why: str):
        super().__init__(why)
        self.index = index
        self.why = why


@dataclass
class Host:
    """A running host and the driver's connection to it; ``output``: the newest batch's output it left (a
    standby's, which the driver reads only once the standby took over)."""

    address: HostAddress
    client: flight.FlightClient
    output: Output | None = None

    @classmethod
    def connect(cls, address: HostAddress) -> Host:
        return cls(address, flight.FlightClient(address.location))

    def named(self, role: str = "state host") -> str:
        a = self.address
        return f"the {role} of partition {a.partition} (executor {a.host}, pid {a.pid}, {a.location})"

    def close(self) -> None:
        self.client.close()


def in_thread(call: Callable[..., Any], *args: Any) -> Future:
    """``call(*args)`` on a daemon thread (a call to a hung host must never hold the driver's exit)."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(call(*args))
        except BaseException as exc:  # noqa: BLE001 - the caller's
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="misa-host-call").start()
    return future


def send_request(host: Host, key: bytes, name: str, args: tuple[Any, ...]) -> Reply:
    """``host``'s reply to request ``name`` with ``args`` (no liveness check: see :func:`wait_replies`)."""
    body = pickle.dumps((name, args))
    results = list(host.client.do_action(flight.Action(REQUEST, body), call_options(key)))
    return pickle.loads(results[0].body.to_pybytes())


def wait_replies(
    calls: Mapping[K, Future], hosts: Mapping[K, Host], key: bytes, timeout: float, replies: dict[K, Reply]
) -> dict[K, str]:
    """Wait for ``calls`` (to ``hosts``, by the same keys; their replies into ``replies``); the keys whose call
    failed, or whose host did not answer a ping within ``timeout`` seconds, and why."""
    lost: dict[K, str] = {}
    while True:
        running = [c for k, c in calls.items() if k not in lost and not c.done()]
        wait(running, timeout=min(5.0, timeout / 2))
        for k, call in calls.items():
            if k in lost or not call.done():
                continue
            if call.exception() is not None:
                lost[k] = f"its connection failed ({first_line(call.exception())})"
            else:
                replies[k] = call.result()
        waiting = {k: hosts[k] for k, c in calls.items() if k not in lost and not c.done()}
        if not waiting:
            return lost
        lost.update(unresponsive(waiting, key, timeout))


def unresponsive(hosts: Mapping[K, Host], key: bytes, timeout: float) -> dict[K, str]:
    """Those of ``hosts`` that do not answer a ping within ``timeout`` seconds, and why."""
    options = call_options(key, timeout)
    pings = {k: in_thread(_ping, h, options) for k, h in hosts.items()}
    lost = {}
    for k, ping in pings.items():
        try:
            ping.result(timeout + 5.0)
        except Exception as exc:  # noqa: BLE001 - any failure to answer
            lost[k] = (
                f"it did not answer a liveness check within {timeout:g} s (spark.misa.state.livenessTimeout): "
                f"hung, stopped or gone ({first_line(exc)})"
            )
    return lost


def _ping(host: Host, options: flight.FlightCallOptions) -> None:
    list(host.client.do_action(flight.Action(PING, b""), options))


def call_one(host: Host, key: bytes, timeout: float, name: str, args: tuple[Any, ...], doing: str) -> Any:
    """``host``'s reply to one request: its error raised (noted as made while ``doing``), its loss
    :class:`HostLost`."""
    replies: dict[int, Reply] = {}
    lost = wait_replies({0: in_thread(send_request, host, key, name, args)}, {0: host}, key, timeout, replies)
    if lost:
        raise HostLost(host.address.partition, lost[0])
    status, value = replies[0]
    if status == "error":
        value.add_note(f"(in {host.named()}, {doing})")
        raise value
    return value


def first_line(exc: BaseException | None) -> str:
    """The first line of ``exc``'s text, or its type's name."""
    return str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else type(exc).__name__
