"""The driver's side of the state hosts: the same requests as :class:`misa.parallel.pool.WorkerPool`, over Flight,
and a lost host replaced without failing the batch.

Requests go to every host at once, each on a thread of its own, with liveness checks (:mod:`.calls`). A host that is
gone, or that does not answer within ``spark.misa.state.livenessTimeout``, is lost: its partition alone moves. With
``spark.misa.state.standbyReplicas``, each partition's standbys get every request that changes its state (and the
same rows) at the same time as its host, and the first takes over at once (:meth:`HostPool._take_over`). Without
one, a new host (:meth:`~misa.hosts.launch.HostGroup.replacement`) loads the partition's newest durable version and
redoes the requests since (:mod:`.journal`), then answers the request the lost one did not. The other hosts keep
their stores, caches and pending commits. More than ``spark.misa.state.hostMaxFailures`` losses of one partition in
a batch break the pool until :meth:`HostPool.restart`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from functools import partial
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql import DataFrame, SparkSession

from misa.config import MisaConfig
from misa.exceptions import StateWorkerError
from misa.hosts.calls import (
    Host,
    HostLost,
    Reply,
    call_one,
    first_line,
    in_thread,
    send_request,
    unresponsive,
    wait_replies,
)
from misa.hosts.host_task import HostAddress
from misa.hosts.journal import COMMIT, HostJournal, Request, Resend, renewed
from misa.hosts.launch import HostGroup
from misa.hosts.output import HostRows
from misa.hosts.send import KeysOf, Sent, send_frame
from misa.hosts.server import Inbox, Output, call_options, stream_path
from misa.hosts.ticker import Ticker
from misa.parallel.routing import partition_of_rows, split
from misa.parallel.worker import CLOSE
from misa.state.store import EMPTY_VERSION

log = logging.getLogger(__name__)
_DRIVER = -1  # the Spark partition the driver's own sendings are filed under
_OUTPUTS = ("apply", "no_data_batch")  # the requests whose replies leave a batch's output on the hosts
_FIRST_ROWS = 1 << 62  # a first batch's deltas go from Spark's tasks: their size is not known yet
_RESETS = ("claim", "load", "adopt", "renew")  # requests that set a host's state anew (a start, a rewind)
_KEEP_S = 1.0  # how often the standbys a partition lacks are looked for between the batches


class HostPool:
    """One state host per partition on Spark's executors, each with a copy of the (pickled) operator, and
    ``spark.misa.state.standbyReplicas`` standbys of it."""

    def __init__(self, spark: SparkSession, config: MisaConfig, dfs_urls: Sequence[str], operator: bytes):
        self.config = config
        self.group = HostGroup(spark, config, operator, list(dfs_urls))
        self.locations = [(f"the state host of partition {i}", url) for i, url in enumerate(dfs_urls)]
        self.journal = HostJournal()
        self._hosts: list[Host] = []
        self._standbys: list[list[Host]] = []  # each partition's standbys, the first to take over first
        self._joining: list[list[Host]] = []
        self._sent_to: dict[str, set[str]] = {}  # the standbys (locations) each remembered sending reached
        self._launch = 0  # counts starts, stops and resets: a standby's catching up outlives none of them
        self._outputs: list[Output | None] = []  # the newest batch's output on each host
        self._losses: dict[int, int] = {}  # losses of each partition since the last commit
        self._last_rows = _FIRST_ROWS  # the rows of the newest batch's deltas (:meth:`route`)
        self._broken: StateWorkerError | None = None
        self._lock = threading.RLock()  # one request at a time: the batch's thread and the mirror's both ask
        self._keeper: Ticker | None = None
        self._start()

    def __len__(self) -> int:
        return len(self.locations)

    @property
    def addresses(self) -> list[HostAddress]:
        """Each partition's host."""
        return [h.address for h in self._hosts]

    def _start(self) -> None:
        self._hosts = [Host.connect(address) for address in self.group.start()]
        self._standbys = [[] for _ in self._hosts]  # the others join once the start recovered (:meth:`_follow`)
        self._joining = [[] for _ in self._hosts]  # standbys catching up
        self._launch += 1
        self._outputs = [None] * len(self)
        self.journal = HostJournal()
        self.group.open_seats(self._held)
        if self.config.state_standby_replicas:
            launch = self._launch
            self._keeper = Ticker(lambda: self._keep_standbys(launch), _KEEP_S, "misa-standby-keeper")

    def _keep_standbys(self, launch: int) -> bool:
        """Between the batches: the standbys the partitions lack are started again and attached (as at a sending),
        so that an idle query's are ready before the next loss; False once ``launch``'s hosts stopped."""
        if not self._lock.acquire(blocking=False):
            return True  # a request runs (a sending attaches them itself)
        try:
            if launch != self._launch:
                return False
            if self._broken is None:
                self._attach_standbys()
            return True
        finally:
            self._lock.release()

    def _held(self) -> tuple[dict[int, int], int]:
        """Each partition's standbys (those catching up too) and the host tasks serving in all, read without the
        lock: the registry's thread asks while a batch holds it (:mod:`.seats`)."""
        standbys = {i: len(s) + len(j) for i, (s, j) in enumerate(zip(self._standbys, self._joining))}
        return standbys, len(self._hosts) + sum(standbys.values())

    @property
    def _timeout(self) -> float:
        return self.config.state_liveness_timeout_s

    # ------------------------------------------------------------------ requests
    def ask(self, name: str, *args: Any) -> list[Any]:
        """Every host's reply to request ``name`` with ``args``."""
        return self.ask_each(name, [args] * len(self))

    def ask_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Every host's reply to request ``name``, host i with ``args[i]`` (a lost host's partition answers from its
        standby or new host); the first error a host sent back is raised once every reply is in."""
        with self._lock:
            self._check()
            if name in _RESETS:
                self._reset_standbys(f"its host was asked to {name} (the standby follows anew)")
            request = self.journal.record(name, list(args))
            replies = self._ask_all(name, list(args), request)
            if name == "call" and args[0][:2] == ("controller", "wait_durable"):
                self.journal.durable(int(args[0][2]))
            if name == COMMIT:
                self._losses.clear()
        for index, (status, value) in enumerate(replies):
            if status == "error":
                value.add_note(f"(in {self._hosts[index].named()})")
                raise value
        return [value for _, value in replies]

    def _ask_all(self, name: str, args: list[tuple[Any, ...]], request: Request | None) -> list[Reply]:
        """Every host's reply; a request that changes the state goes to the standbys too. A lost host's standby
        takes over with its reply to the same request; without one, a new host is caught up to ``request`` and
        asked again."""
        replies: dict[int, Reply] = {}
        pending = list(range(len(self)))
        while pending:
            calls = {i: in_thread(send_request, self._hosts[i], self.group.key, name, args[i]) for i in pending}
            same = request is not None or name == "drop"
            mirrored = self._mirror(pending, name, args, same)
            lost = wait_replies(calls, {i: self._hosts[i] for i in pending}, self.group.key, self._timeout, replies)
            answered = self._settle(mirrored, name, same, replies, lost)
            for index, why in lost.items():
                self._fail_over(index, name, why, request)
                if index in answered and self._hosts[index] is answered[index][0]:
                    replies[index] = answered[index][1]
                else:
                    args[index] = renewed(args[index], partial(self._resend, index, None))
            pending = [i for i in lost if i not in replies]
        ordered = [replies[i] for i in range(len(self))]
        if name in _OUTPUTS:
            self._outputs = [value.output if status == "ok" else None for status, value in ordered]
        return ordered

    def _mirror(
        self, indexes: Sequence[int], name: str, args: list[tuple[Any, ...]], same: bool
    ) -> dict[tuple[int, int], Any]:
        """To the standbys of ``indexes``' partitions, by (partition, standby): the same request (``same``: one that
        changes the state, or a sending's drop), else a drop of the rows the request names (a standby holds a
        copy of every sending's rows, and takes only those of the requests it is sent)."""
        calls = {}
        for i in indexes:
            inboxes = [a for a in args[i] if isinstance(a, Inbox)]
            if not same and not inboxes:
                continue
            name_i, args_i = (name, args[i]) if same else ("drop", (inboxes[0].token,))
            for k, standby in enumerate(self._standbys[i]):
                args_k = args_i
                got = standby.address.location
                if same and any(got not in self._sent_to.get(box.token, ()) for box in inboxes):
                    args_k = renewed(args_i, partial(self._resend, i, standby))  # it joined after the sending
                calls[(i, k)] = in_thread(send_request, standby, self.group.key, name_i, args_k)
        return calls

    def _settle(
        self,
        mirrored: dict[tuple[int, int], Any],
        name: str,
        same: bool,
        replies: dict[int, Reply],
        lost: dict[int, str],
    ) -> dict[int, tuple[Host, Reply]]:
        """Wait for the standbys' replies to ``name``: one lost, or whose reply to its host's own request differs in
        kind, is dropped. For a partition whose host was ``lost``, the first standby that answered the host's
        request is put first (it takes over) and its reply is the partition's (``same``: the standbys were sent
        the host's request, not a drop)."""
        hosts = {(i, k): self._standbys[i][k] for i, k in mirrored}
        got: dict[tuple[int, int], Reply] = {}
        gone = wait_replies(mirrored, hosts, self.group.key, self._timeout, got)
        answered: dict[int, tuple[Host, Reply]] = {}
        dropped: list[tuple[Host, str]] = []
        for (index, k), standby in hosts.items():
            if (index, k) in gone:
                dropped.append((standby, gone[(index, k)]))
                continue
            status, value = got[(index, k)]
            if not same:
                continue
            if index not in lost and status != replies[index][0]:
                dropped.append((standby, f"it answered {name!r} with {status} where its host did not"))
                continue
            if name in _OUTPUTS and status == "ok":
                standby.output = value.output
            if index in lost and index not in answered:
                answered[index] = (standby, (status, value))
                self._standbys[index].remove(standby)
                self._standbys[index].insert(0, standby)
        for standby, why in dropped:
            self._drop_standby(standby, why)
        return answered

    def _reset_standbys(self, why: str) -> None:
        """Drop every standby, and those catching up (their threads' work is abandoned): a request of
        :data:`_RESETS` sets the hosts' state anew, which the standbys do not follow; Spark runs their tasks again and
        they follow from the next sending on."""
        everyone = [s for hosts in (*self._standbys, *self._joining) for s in hosts]
        if not everyone:
            return
        self._launch += 1
        self._joining = [[] for _ in self._hosts]
        for standby in everyone:
            self._drop_standby(standby, why)

    def _drop_standby(self, standby: Host, why: str) -> None:
        """Forget a standby that was lost or fell out of step; Spark runs its task again, and the new attempt
        becomes a standby at a later batch."""
        log.warning("%s is dropped: %s", standby.named("standby"), why)
        standbys = self._standbys[standby.address.partition]
        if standby in standbys:
            standbys.remove(standby)
        standby.close()
        self.group.kill(standby.address, f"misa: standby of partition {standby.address.partition} dropped")

    def _check(self) -> None:
        if self._broken is not None:
            raise self._broken

    # ------------------------------------------------------------------ failover
    def _fail_over(self, index: int, name: str, why: str, request: Request | None) -> None:
        """Replace lost host ``index``: by its first standby (caught up already), else by a new one caught up to
        ``request`` (None: every recorded request)."""
        while True:
            losses = self._losses[index] = self._losses.get(index, 0) + 1
            limit = self.config.state_host_max_failures
            if losses > limit:
                self._broken = StateWorkerError(
                    f"{self._hosts[index].named()} failed while answering {name!r}: {why}. Its partition was lost "
                    f"{losses} times in this batch (spark.misa.state.hostMaxFailures={limit}): the batch fails. "
                    f"Restart the query: every partition recovers from the newest version all of them made durable."
                )
                raise self._broken
            log.warning(
                "%s was lost while answering %r: %s; its partition moves", self._hosts[index].named(), name, why
            )
            started = time.monotonic()
            try:
                if self._standbys[index]:
                    self._take_over(index)
                else:
                    self._replace(index, request)
            except HostLost as again:
                name, why = "taking over", again.why
                continue
            except StateWorkerError as exc:
                self._broken = exc
                raise
            log.warning(
                "partition %d moved to %s (pid %d) in %.1f s",
                index,
                self._hosts[index].address.location,
                self._hosts[index].address.pid,
                time.monotonic() - started,
            )
            return

    def _take_over(self, index: int) -> None:
        """Partition ``index``'s first standby becomes its host: it claims the partition (which fences the lost
        host) and uploads its versions the DFS lacks; the lost host's task attempt is killed."""
        standby = self._standbys[index].pop(0)
        log.warning("partition %d: its standby at %s takes over", index, standby.address.location)
        lost, self._hosts[index] = self._hosts[index], standby
        lost.close()
        self.group.kill(lost.address, f"misa: the state host of partition {index} was lost; its standby took over")
        try:
            call_one(standby, self.group.key, self._timeout, "claim", self.journal.claim or (), "taking over")
        except HostLost:
            standby.close()
            raise
        self._outputs[index] = standby.output

    def _replace(self, index: int, request: Request | None) -> None:
        """A new host for partition ``index`` (Spark runs its task again), caught up to ``request``."""
        address = self.group.replacement(self._hosts[index].address)
        self._hosts[index].close()
        self._hosts[index] = host = Host.connect(address)
        if self.journal.claim is None:
            return  # not claimed yet: the start makes its requests again
        if self.journal.base is None:  # the start's recovery was running: its steps are not recorded to redo
            raise StateWorkerError(
                f"the state host of partition {index} was lost while the start recovered the state: the start fails; "
                f"start the query again (its hosts start anew and recover every partition)"
            )
        self._catch_up(index, host, "claim", request)
        if host.output is not None:
            self._outputs[index] = host.output

    def _catch_up(self, index: int, host: Host, claim: str, request: Request | None) -> None:
        """Bring ``host`` to where partition ``index``'s host stands before ``request``: the start's claim (``claim``,
        or ``follow`` for a standby), the partition's newest durable version, then the recorded requests after it
        (their rows sent again)."""
        self._redo(index, host, self._load_newest(index, host, claim, request), request)

    def _load_newest(self, index: int, host: Host, claim: str, before: Request | None = None) -> int:
        """``host`` takes the start's claim (``claim``: ``claim``, or ``follow`` for a standby) and loads partition
        ``index``'s newest durable version, but none newer than the journal's last commit before ``before`` (the
        request being answered when the host was lost, :meth:`HostJournal.settled`); that version."""
        journal = self.journal
        call_one(host, self.group.key, self._timeout, claim, journal.claim or (), "catching up")
        durable = call_one(host, self.group.key, self._timeout, "call", ("checkpoints", "newest_durable"), "loading")
        settled = journal.settled(before)
        loaded = EMPTY_VERSION if durable is None else int(durable)
        if settled is not None and loaded > settled:
            loaded = settled  # the lost host made it durable while answering ``before``: its batch is redone
        if loaded < (journal.base or EMPTY_VERSION):
            raise StateWorkerError(
                f"partition {index}'s newest durable version is {loaded}, older than version {journal.base} which "
                f"every partition made durable: its DFS copy lost versions, so a new host cannot catch up"
            )
        call_one(host, self.group.key, self._timeout, "load", (loaded,), "loading")
        call_one(host, self.group.key, self._timeout, "adopt", (loaded,), "loading")
        return loaded

    def _redo(self, index: int, host: Host, loaded: int, request: Request | None) -> None:
        """``host``, loaded at ``loaded``, redoes the recorded requests after it up to ``request`` (their rows sent
        again to it alone)."""
        for redo in self.journal.after(loaded, before=request):
            args = renewed(redo.args[index], partial(self._resend, index, host))
            reply = call_one(host, self.group.key, self._timeout, redo.name, args, "catching up")
            if redo.name in _OUTPUTS:
                host.output = reply.output

    def _attach_standbys(self) -> None:
        """Give each partition its standbys from the hosts that reported and were not taken (at start, or tasks
        Spark or the seats ran again, :meth:`~misa.hosts.launch.HostGroup.start_again`): each follows the partition
        in the background (:meth:`_follow`). Only once the start recovered the state (the journal then holds what a
        standby must redo)."""
        if self.journal.claim is None or self.journal.base is None:
            return
        self.group.start_again()
        for index in range(len(self)):
            while len(self._standbys[index]) + len(self._joining[index]) < self.config.state_standby_replicas:
                address = self.group.fresh(index)
                if address is None:
                    break
                joining = Host.connect(address)
                self._joining[index].append(joining)
                threading.Thread(
                    target=self._follow, args=(index, joining, self._launch), name="misa-standby-join", daemon=True
                ).start()

    def _follow(self, index: int, standby: Host, launch: int) -> None:
        """A new standby of partition ``index`` loads its newest durable version (without holding up the batches),
        then, between two requests, redoes the recorded ones after it and joins; one that fails is dropped."""
        started = time.monotonic()
        try:
            loaded = self._load_newest(index, standby, "follow")
            with self._lock:
                if launch != self._launch:
                    return  # the hosts were stopped, or the standbys reset, meanwhile (it was dropped)
                if loaded < (self.journal.base or EMPTY_VERSION):  # the journal moved past it meanwhile
                    loaded = self._load_newest(index, standby, "follow")
                self._redo(index, standby, loaded, None)
                self._joining[index].remove(standby)
                self._standbys[index].append(standby)
        except Exception as exc:  # noqa: BLE001 - the partition keeps its host; Spark runs the task again
            with self._lock:
                if launch == self._launch:
                    self._joining[index].remove(standby)
                    self._drop_standby(standby, f"it could not catch up ({first_line(exc)})")
            return
        log.info("%s follows (caught up in %.1f s)", standby.named("standby"), time.monotonic() - started)
        self._check_apart(index)

    def _check_apart(self, index: int) -> None:
        """Warn when a standby of partition ``index`` runs on its host's executor (Spark had no free slot on
        another): it would be lost with the host."""
        host = self._hosts[index]
        executors = self.group.executors([host.address, *(s.address for s in self._standbys[index])])
        for standby in self._standbys[index]:
            shared = executors.get(standby.address.task_attempt)
            if shared is not None and shared == executors.get(host.address.task_attempt):
                log.warning(
                    "%s runs on executor %s with its host: the loss of that executor loses both (give the cluster "
                    "a free slot on another executor)",
                    standby.named("standby"),
                    shared,
                )

    def _hand_over_leaving(self) -> None:
        """Move the partitions of hosts whose executor is decommissioning before it leaves: each host first makes its
        pending versions durable, so its standby or new host starts from its last version (nothing to redo); the
        standbys there are dropped (Spark runs their tasks again elsewhere)."""
        standbys = [s for partition in self._standbys for s in partition]
        leaving = self.group.decommissioning([*self.addresses, *(s.address for s in standbys)])
        for standby in standbys:
            if standby.address.task_attempt in leaving:
                self._drop_standby(standby, "its executor is decommissioning")
        for index, host in enumerate(self._hosts):
            if host.address.task_attempt in leaving:
                log.warning("%s runs on a decommissioning executor: its partition moves", host.named())
                call_one(host, self.group.key, self._timeout, "call", ("controller", "drain"), "handing over")
                self._fail_over(index, "the hand-over", "its executor is decommissioning", None)

    def _resend(self, index: int, host: Host | None, inbox: Inbox) -> Inbox:
        """The rows ``inbox`` named, sent again to ``host`` (None: partition ``index``'s host) alone; its new
        inbox."""
        resend = self.journal.sendings.get(inbox.token)
        if resend is None:
            raise StateWorkerError(f"the rows of sending {inbox.token} are no longer known: they cannot be sent again")
        target = host or self._hosts[index]
        if isinstance(resend.rows, DataFrame):
            locations = [(target.address.location,) if i == index else () for i in range(len(self))]
            sent = send_frame(resend.rows, locations, self.group.key, resend.keys_of, resend.latest_of, only=index)
            return sent.inboxes[index]
        targets = [[target] if i == index else [] for i in range(len(self))]
        return self._put_table(resend.rows, resend.keys_of, f"driver-{uuid.uuid4().hex}", targets)[index]

    def recovered_rows(self) -> HostRows | None:
        """After a failure to read the batch's output: every lost host replaced (its output made again, or its
        standby's), and the output where it now is; None when no host was lost."""
        with self._lock:
            self._check()
            lost = unresponsive(dict(enumerate(self._hosts)), self.group.key, self._timeout)
            for index, why in lost.items():
                self._fail_over(index, "the batch's output", why, None)
        return self.gather(self._outputs) if lost else None  # type: ignore[arg-type]  # every host's is set

    # ------------------------------------------------------------------ tables
    def route(self, deltas: pa.Table | DataFrame, keys_of: KeysOf) -> tuple[list[Any], int]:
        """Each host's reference to its part of ``deltas`` and the rows: a DataFrame's rows go from Spark's tasks
        to the hosts (:func:`~misa.hosts.send.send_frame`), a table's from the driver. After a batch of at most
        ``spark.misa.state.hostDeltasDriverRows`` deltas the driver collects a DataFrame's rows and sends them
        itself: for a small batch that costs less than the tasks' Python workers."""
        driver_rows = self.config.state_host_deltas_driver_rows
        if isinstance(deltas, DataFrame) and driver_rows and self._last_rows <= driver_rows:
            deltas = deltas.toArrow()
        if isinstance(deltas, DataFrame):
            sent = self.send(deltas, keys_of)
            self._last_rows = sent.rows
            return sent.inboxes, sent.rows
        inboxes = self._sending(partial(self._put_table, deltas, keys_of), Resend(deltas, keys_of))
        self._last_rows = deltas.num_rows
        return inboxes, deltas.num_rows

    def _put_table(self, table: pa.Table, keys_of: KeysOf, token: str, targets: list[list[Host]]) -> list[Inbox]:
        """``table``'s rows from the driver to their partitions' ``targets`` (each partition's host, then its
        standbys; none: not that partition's) under ``token``; each partition's inbox. A standby that does not take
        its part is dropped when it cannot take the request that names it."""
        partition = partition_of_rows(keys_of(table), table.num_rows, len(self))
        for index, part in enumerate(split(table, partition, len(self))):
            for k, target in enumerate(targets[index]):
                try:
                    descriptor = flight.FlightDescriptor.for_path(*stream_path(token, _DRIVER, 0))
                    writer, _ = target.client.do_put(descriptor, table.schema, call_options(self.group.key))
                    writer.write_table(part)
                    writer.close()
                except flight.FlightError:
                    if k == 0:
                        raise
                    log.warning("%s did not take rows of sending %s", target.named("standby"), token)
        schema = table.schema.serialize().to_pybytes()
        return [Inbox(token, ((_DRIVER, 0),), schema) for _ in range(len(self))]

    def _paired(self) -> list[tuple[Host, list[Host]]]:
        return list(zip(self._hosts, self._standbys))

    def send(self, frame: DataFrame, keys_of: KeysOf, latest_of: str | None = None) -> Sent:
        """``frame``'s rows from Spark's tasks to their hosts and standbys (:func:`~misa.hosts.send.send_frame`), once
        every host answered a ping: a host that is gone is replaced first, not found through Spark's retries of
        every task that cannot reach it (``spark.task.maxFailures`` attempts each)."""

        def attempt(token: str, targets: list[list[Host]]) -> list[Inbox]:
            locations = [tuple(h.address.location for h in hosts) for hosts in targets]
            done.append(send_frame(frame, locations, self.group.key, keys_of, latest_of, token=token))
            return done[-1].inboxes

        done: list[Sent] = []
        self._sending(attempt, Resend(frame, keys_of, latest_of))
        return done[-1]

    def _sending(self, attempt: Callable[[str, list[list[Host]]], list[Inbox]], resend: Resend) -> list[Inbox]:
        """Run a sending (``attempt``: to each partition's host and standbys) once every host answers; a sending
        that fails while a host is lost is dropped by the others and made again once the host was replaced. Its rows
        are remembered for new hosts (:meth:`_resend`), and the standbys that got them (a standby that joins later
        is sent them when a request names them, :meth:`_mirror`)."""
        lost: dict[int, str] | None = None
        while True:
            with self._lock:
                self._check()
                if lost is None:
                    self._hand_over_leaving()
                    self._attach_standbys()
                    lost = unresponsive(dict(enumerate(self._hosts)), self.group.key, self._timeout)
                for index, why in lost.items():
                    self._fail_over(index, "the batch's rows", why, None)
                targets = [[host, *standbys] for host, standbys in self._paired()]
            token = uuid.uuid4().hex
            try:
                inboxes = attempt(token, targets)
            except Exception:
                with self._lock:
                    lost = unresponsive(dict(enumerate(self._hosts)), self.group.key, self._timeout)
                    if not lost:
                        raise
                    self._drop_on_others(token, lost)
                log.warning("a sending failed while the host(s) of partition(s) %s were lost: made again", sorted(lost))
                continue
            with self._lock:
                self.journal.sent(token, resend)
                self._sent_to = {t: ids for t, ids in self._sent_to.items() if t in self.journal.sendings}
                self._sent_to[token] = {h.address.location for hosts in targets for h in hosts[1:]}
            return inboxes

    def _drop_on_others(self, token: str, lost: dict[int, str]) -> None:
        """The hosts still answering, and every standby, forget a failed sending's streams."""
        for index, (host, standbys) in enumerate(self._paired()):
            for standby in list(standbys):
                try:
                    call_one(standby, self.group.key, self._timeout, "drop", (token,), "dropping a sending")
                except HostLost as gone:
                    self._drop_standby(standby, gone.why)
            if index not in lost:
                try:
                    call_one(host, self.group.key, self._timeout, "drop", (token,), "dropping a sending")
                except HostLost as gone:  # lost too: replaced with the others before the sending is made again
                    lost[index] = gone.why

    def gather(self, outputs: Sequence[Output]) -> HostRows:
        """The output rows the hosts left, where they are: ``outputs`` of the hosts' replies, but a new host's own
        (it made the batch's output again while catching up); with a way to find them again after a host's loss."""
        now = [mine or given for mine, given in zip(self._outputs, outputs)] if self._outputs else list(outputs)
        locations = tuple(a.location for a in self.addresses)
        driver_rows = self.config.state_host_output_driver_rows
        return HostRows(locations, tuple(now), self.group.key, self.recovered_rows, driver_rows)

    def discard(self, refs: Sequence[Inbox]) -> None:
        """Drop a sending the hosts never took (its batch failed first)."""
        if self._broken is None and refs:
            self.ask("drop", refs[0].token)

    # ------------------------------------------------------------------ life
    def restart(self) -> None:
        """Stop every host (without waiting for its commits) and start new ones."""
        self._stop(cancel=True)
        self._broken = None
        self._losses.clear()
        self._start()

    def close(self) -> None:
        """Ask every host and standby to close (each raises a commit failure nobody has seen); the hosts' job then
        ends (it is cancelled if a host could not be asked)."""
        closed = False
        try:
            if self._broken is None:
                self.ask(CLOSE)
                closed = self._close_others()
        finally:
            self._stop(cancel=not closed)

    def _close_others(self) -> bool:
        """Close the standbys and the hosts that reported but were never taken; whether every one closed."""
        others = [s for hosts in (*self._standbys, *self._joining) for s in hosts]
        others += [Host.connect(a) for a in self.group.leftovers()]
        closed = True
        for other in others:
            try:
                call_one(other, self.group.key, self._timeout, CLOSE, (), "closing")
            except Exception as exc:  # noqa: BLE001 - its task is cancelled with the job
                log.warning("%s did not close: %s", other.named("standby"), first_line(exc))
                closed = False
            other.close()
        self._standbys = [[] for _ in self._hosts]
        self._joining = [[] for _ in self._hosts]
        return closed

    def _stop(self, cancel: bool = True) -> None:
        if self._keeper is not None:
            self._keeper.stop()
        with self._lock:
            self._launch += 1
            for host in [*self._hosts, *(s for hosts in (*self._standbys, *self._joining) for s in hosts)]:
                host.close()
            self._hosts, self._standbys, self._joining = [], [], []
        if cancel:
            self.group.cancel()
        else:
            self.group.join()
