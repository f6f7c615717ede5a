"""What a state host holds (the streams Spark's tasks put, taken as Spark accepted them, and the output it leaves),
and whom it serves."""

import threading

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from misa.hosts.server import PING, HostTables, Inbox, StateHostServer, call_options, stream_path

SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64())])


def rows(*pairs: tuple[str, int]) -> pa.Table:
    return pa.table({"k": [k for k, _ in pairs], "n": [n for _, n in pairs]}, schema=SCHEMA)


def inbox(token: str, *sources: tuple[int, int]) -> Inbox:
    return Inbox(token, tuple(sources), SCHEMA.serialize().to_pybytes())


def test_a_sending_is_taken_in_sparks_partition_order_from_the_accepted_attempts_only():
    tables = HostTables()
    tables.put(stream_path("b1", 1, 0), rows(("late", 9)))  # attempt 0 of partition 1 failed after sending
    tables.put(stream_path("b1", 1, 1), rows(("c", 3)))
    tables.put(stream_path("b1", 0, 0), rows(("a", 1)))
    tables.put(stream_path("b1", 0, 0), rows(("b", 2)))  # a second chunk of the same stream
    tables.put(stream_path("b2", 0, 0), rows(("next", 0)))  # another sending stays
    taken = tables.take(inbox("b1", (0, 0), (1, 1)))
    assert taken.to_pydict() == {"k": ["a", "b", "c"], "n": [1, 2, 3]}
    assert tables.take(inbox("b1")).num_rows == 0  # the sending is gone, its failed attempt's stream too
    assert tables.take(inbox("b2", (0, 0))).to_pydict() == {"k": ["next"], "n": [0]}


def test_a_stream_spark_accepted_but_the_host_never_got_fails_the_take():
    tables = HostTables()
    tables.put(stream_path("b1", 0, 0), rows(("a", 1)))
    with pytest.raises(RuntimeError, match=r"never received .* \[\(1, 0\)\]"):
        tables.take(inbox("b1", (0, 0), (1, 0)))


def test_a_sending_without_rows_is_an_empty_table_of_the_deltas_schema():
    assert HostTables().take(inbox("none")).schema == SCHEMA


def test_the_newest_output_is_read_as_often_as_asked_until_the_next_replaces_it():
    tables = HostTables()
    first = tables.share(rows(("a", 1)))
    assert tables.fetch(first.handle).num_rows == 1 and tables.fetch(first.handle).num_rows == 1  # a task retried
    second = tables.share(pa.table({}))
    assert (first.rows, second.rows, second.schema) == (1, 0, b"")
    with pytest.raises(KeyError):
        tables.fetch(first.handle)


def test_a_host_refuses_every_call_without_its_launchs_key():
    tables = HostTables()
    server = StateHostServer("grpc+tcp://127.0.0.1:0", None, tables, b"k" * 32)
    client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{server.port}")
    try:
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(client.do_action(flight.Action(PING, b"")))
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(client.do_action(flight.Action(PING, b""), call_options(b"x" * 32)))
        descriptor = flight.FlightDescriptor.for_path(*stream_path("b1", 0, 0))
        with pytest.raises(flight.FlightUnauthenticatedError):
            writer, _ = client.do_put(descriptor, SCHEMA)
            writer.write_table(rows(("a", 1)))
            writer.close()
        assert tables.take(inbox("b1")).num_rows == 0  # nothing reached the inbox
        assert [r.body.to_pybytes() for r in client.do_action(flight.Action(PING, b""), call_options(b"k" * 32))] == [
            b"ok"
        ]
    finally:
        client.close()
        server.shutdown()


def test_a_tasks_rows_reach_their_hosts_split_by_key_with_each_hosts_latest_value():
    """``send_rows`` (a task of a sending): each row to the host its key routes to, and to that host's standbys, one
    row back per host it sent to, with the largest value of the sending's ``latest_of`` column among that host's
    rows. A standby that is gone fails no task."""
    import socket

    from misa.hosts.send import Sending, send_rows
    from misa.parallel.routing import partition_of_rows

    key = b"k" * 32
    hosts = [HostTables(), HostTables(), HostTables()]  # partition 0's host, partition 1's, partition 0's standby
    servers = [StateHostServer("grpc+tcp://127.0.0.1:0", None, t, key) for t in hosts]
    with socket.socket() as probe:  # a port nobody listens on: partition 1's standby, whose executor is gone
        probe.bind(("127.0.0.1", 0))
        gone = f"grpc+tcp://127.0.0.1:{probe.getsockname()[1]}"
    at = [f"grpc+tcp://127.0.0.1:{s.port}" for s in servers]
    try:
        table = rows(*[(f"key{i}", i) for i in range(20)])
        sending = Sending(
            ((at[0], at[2]), (at[1], gone)),
            key,
            "t1",
            SCHEMA.serialize().to_pybytes(),
            lambda t: [t["k"]],
            latest_of="n",
        )
        sent = send_rows(sending, 3, 1, iter(table.to_batches(max_chunksize=7)))
    finally:
        for server in servers:
            server.shutdown()
    owner = partition_of_rows([table["k"]], table.num_rows, 2)
    expected = {h: [n for n, o in zip(table["n"].to_pylist(), owner) if o == h] for h in (0, 1)}
    assert sent.to_pydict() == {
        "spark_partition": [3, 3],
        "attempt": [1, 1],
        "host": [0, 1],
        "rows": [len(expected[0]), len(expected[1])],
        "latest": [max(expected[0]), max(expected[1])],
    }
    for h in (0, 1):
        assert sorted(hosts[h].take(inbox("t1", (3, 1)))["n"].to_pylist()) == expected[h]
    assert sorted(hosts[2].take(inbox("t1", (3, 1)))["n"].to_pylist()) == expected[0]


def test_the_parquet_sink_has_the_hosts_write_their_output_rows_where_they_are(tmp_path):
    """``ParquetBatchSink.write_spread``: without ``sort_by`` each host with rows writes them as its own file, with it
    the first host fetches the others' rows and writes one sorted file; the batch's rows equal the table's, and a
    failed write (a host gone) leaves the earlier attempt replaced by the next whole. Through ``from_query`` each
    host first makes its rows the query's columns (:class:`~misa.query.output.ShapedRows`)."""
    from misa.hosts.output import HostRows
    from misa.io.sink import ParquetBatchSink, read_batches
    from misa.query.output import ArrowShape, ShapedRows

    key = b"k" * 32
    parts = [rows(("c", 3), ("a", 1)), rows(), rows(("b", 2))]  # the middle host has no rows
    tables = [HostTables() for _ in parts]
    servers = [StateHostServer("grpc+tcp://127.0.0.1:0", None, t, key) for t in tables]
    at = tuple(f"grpc+tcp://127.0.0.1:{s.port}" for s in servers)
    try:
        output = HostRows(at, tuple(t.share(part) for t, part in zip(tables, parts)), key)
        for sort_by, files in (((), 2), ((("k", "ascending"),), 1)):
            root = tmp_path / f"sorted{len(sort_by)}"
            sink = ParquetBatchSink(root, sort_by)
            servers[2].shutdown()
            with pytest.raises(flight.FlightError):
                sink.write_spread(4, output)
            servers[2] = StateHostServer(f"{at[2]}", None, tables[2], key)  # the host back at its address
            sink.write_spread(4, output)
            [(batch, table)] = read_batches(root)
            assert batch == 4 and len(list((root / "batch_id=4").glob("*.parquet"))) == files
            written = table.to_pydict()["k"]
            assert written == ["a", "b", "c"] if sort_by else sorted(written) == ["a", "b", "c"]
        shape = ArrowShape(
            (("column", "n"), ("column", "k")), pa.schema([("n", pa.int64()), ("k", pa.string())]), ("x", "y")
        )
        ParquetBatchSink(tmp_path / "shaped").write_spread(5, ShapedRows(output, shape))  # from_query's columns
        [(_, table)] = read_batches(tmp_path / "shaped")
        assert table.schema.names == ["x", "y"] and sorted(table.to_pydict()["y"]) == ["a", "b", "c"]
    finally:
        for server in servers:
            server.shutdown()


def test_a_sending_to_a_host_that_is_gone_replaces_it_before_any_spark_job_runs():
    """After an executor's loss every task of the delta job failed to reach its host and Spark retried each
    (``misa bench recovery --cases executor``: 15 to 20 s); the pool pings its hosts first and asks for a new host of
    the lost partition only. Here none comes: the sending fails naming the partition, and no job was planned."""
    import socket

    from misa.config import MisaConfig
    from misa.exceptions import StateWorkerError
    from misa.hosts.calls import Host
    from misa.hosts.client import HostPool
    from misa.hosts.host_task import HostAddress
    from misa.hosts.journal import HostJournal

    key = b"k" * 32
    live = StateHostServer("grpc+tcp://127.0.0.1:0", None, HostTables(), key)
    with socket.socket() as probe:  # a port nobody listens on: the host of an executor that is gone
        probe.bind(("127.0.0.1", 0))
        gone = probe.getsockname()[1]
    locations = [f"grpc+tcp://127.0.0.1:{live.port}", f"grpc+tcp://127.0.0.1:{gone}"]
    asked: list[int] = []

    class Group:
        def decommissioning(self, hosts: list[HostAddress]) -> set[int]:
            return set()

        def replacement(self, lost: HostAddress) -> HostAddress:
            asked.append(lost.partition)
            raise StateWorkerError(f"no new state host for partition {lost.partition}")

    pool = object.__new__(HostPool)
    pool.config = MisaConfig.from_mapping({})
    pool.group = Group()
    pool.group.key = key
    pool.locations = [(f"partition {i}", "") for i in range(2)]
    pool.journal = HostJournal()
    pool._hosts = [Host.connect(HostAddress(i, loc, "localhost", 100 + i)) for i, loc in enumerate(locations)]
    pool._standbys, pool._joining, pool._sent_to = [[], []], [[], []], {}
    pool._losses = {}
    pool._broken = None
    pool._lock = threading.RLock()

    class NoJob:
        def __getattr__(self, name: str) -> None:
            pytest.fail(f"a Spark job was planned ({name})")

    try:
        with pytest.raises(StateWorkerError, match=r"no new state host for partition 1"):
            pool.send(NoJob(), lambda t: [t["k"]])  # type: ignore[arg-type]
        assert asked == [1]  # the live host's partition stays where it is
        with pytest.raises(StateWorkerError):  # the pool stays broken until a restart
            pool.send(NoJob(), lambda t: [t["k"]])  # type: ignore[arg-type]
        assert asked == [1]
    finally:
        for host in pool._hosts:
            host.close()
        live.shutdown()


def test_an_output_of_few_rows_is_fetched_by_the_driver_and_a_larger_one_read_by_spark():
    from misa.hosts.output import HostRows
    from misa.hosts.server import Output

    outputs = (Output("a", 60, b""), Output("b", 50, b""))
    assert HostRows(("x", "y"), outputs, b"k", driver_rows=110).by_driver
    assert not HostRows(("x", "y"), outputs, b"k", driver_rows=109).by_driver
    assert not HostRows(("x", "y"), outputs, b"k", driver_rows=0).by_driver


@pytest.mark.parametrize("driver_rows,ways", [(3, ["tasks", "tasks", "driver", "driver", "tasks"]), (0, ["tasks"] * 5)])
def test_after_a_batch_of_few_deltas_the_driver_sends_the_next_batchs_and_after_a_larger_one_the_tasks_do(
    spark, driver_rows, ways
):
    """Spark's tasks send a batch's deltas to the hosts, unless the batch before had at most
    spark.misa.state.hostDeltasDriverRows (then the driver collects and sends them: no Python worker in the tasks).
    The first batch's size is unknown: the tasks send it."""
    from misa.config import MisaConfig
    from misa.hosts.client import _FIRST_ROWS, HostPool
    from misa.hosts.send import Sent

    pool = object.__new__(HostPool)
    pool.config = MisaConfig.from_mapping({"spark.misa.state.hostDeltasDriverRows": str(driver_rows)})
    pool._last_rows = _FIRST_ROWS
    taken: list[str] = []
    pool.send = lambda frame, keys_of: taken.append("tasks") or Sent([], frame.count(), None)  # type: ignore[method-assign]
    pool._sending = lambda attempt, resend: taken.append("driver") or []  # type: ignore[method-assign]
    for rows_sent in (5, 2, 3, 9, 1):
        assert pool.route(spark.range(rows_sent), lambda t: [t["id"]])[1] == rows_sent
    assert taken == ways
