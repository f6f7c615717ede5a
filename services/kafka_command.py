"""``misa kafka install|up|down|status|produce|jars``: the project's Kafka broker in the background, for runs by hand.

``up`` starts a broker (:class:`services.kafka_broker.KafkaBroker`, detached: it outlives the command), writes its
bootstrap servers, pid, folder and log to a state file (``runs/kafka/broker.json`` by default) and prints the
bootstrap servers; ``down`` stops it and removes its folder; ``status`` says whether it runs (exit 1 if not);
``produce`` writes a generator's folder of JSON lines into a topic (:mod:`services.kafka_produce`); ``jars`` prints
Spark's Kafka connector as ``spark-submit --jars`` takes it.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from misa.exceptions import CommandError
from services.exceptions import KafkaBrokerError
from services.kafka_broker import MAIN_CLASS, KafkaBroker, stop_process
from services.kafka_install import connector_jars, install_broker_jars
from services.kafka_install import main as install_main
from services.kafka_produce import produce_folder

STATE = Path("runs") / "kafka" / "broker.json"


def read_state(path: Path) -> dict | None:
    """The state ``up`` wrote, or None when there is none."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def is_running(state: dict) -> bool:
    """Whether the state's pid is still the broker it names (a reused pid runs something else)."""
    try:
        command = Path(f"/proc/{state['pid']}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return MAIN_CLASS.encode() in command and any(state["dir"].encode() in part for part in command)


def _install(_: argparse.Namespace) -> int:
    return _checked(install_main)


def _up(args: argparse.Namespace) -> int:
    state = read_state(args.state)
    if state is not None and is_running(state):
        print(state["bootstrap"])
        return 0
    _checked(install_broker_jars)  # nothing to do once `make kafka-jars` has run
    broker = _checked(KafkaBroker(detached=True, heap=args.heap).start)
    state = {"bootstrap": broker.bootstrap, "pid": broker.pid, "dir": str(broker.dir), "log": str(broker.log_path)}
    args.state.parent.mkdir(parents=True, exist_ok=True)
    args.state.write_text(json.dumps(state, indent=2) + "\n")
    print(broker.bootstrap)
    return 0


def _down(args: argparse.Namespace) -> int:
    state = read_state(args.state)
    if state is None:
        print(f"no broker state in {args.state}: nothing to stop")
        return 0
    if is_running(state):
        stop_process(state["pid"])
        print(f"stopped the broker at {state['bootstrap']} (pid {state['pid']})")
    else:
        print(f"the broker at {state['bootstrap']} (pid {state['pid']}) was not running")
    shutil.rmtree(state["dir"], ignore_errors=True)
    args.state.unlink()
    return 0


def _status(args: argparse.Namespace) -> int:
    state = read_state(args.state)
    if state is not None and is_running(state):
        print(f"running at {state['bootstrap']} (pid {state['pid']}, log {state['log']})")
        return 0
    print("not running" + (f" (stale state in {args.state})" if state is not None else ""))
    return 1


def _produce(args: argparse.Namespace) -> int:
    state = read_state(args.state)
    bootstrap = args.bootstrap or (state or {}).get("bootstrap")
    if not bootstrap:
        raise CommandError(f"no broker: give --bootstrap, or start one with `misa kafka up` (state {args.state})")
    written = _checked(
        lambda: produce_folder(bootstrap, args.topic, args.source, args.partitions, args.key_field, args.replace)
    )
    print(f"{written.records:,} records ({written.malformed:,} not JSON objects) from {written.files} files "
          f"into {args.topic} ({args.partitions} partitions) at {bootstrap}")  # fmt: skip
    return 0


def print_connector_jars(_: argparse.Namespace) -> int:
    jars = connector_jars()
    if not jars:
        raise CommandError("Spark's Kafka connector is not installed: run `make kafka-jars` (or `misa kafka install`)")
    print(",".join(jars))
    return 0


def _checked(call):
    """``call()``, its error as misa's one-line command error."""
    try:
        return call()
    except KafkaBrokerError as exc:
        raise CommandError(str(exc)) from exc


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``kafka install|up|down|status`` to the ``misa`` command line."""
    kafka = commands.add_parser("kafka", help="the project's own Kafka broker (KRaft, on loopback)")
    sub = kafka.add_subparsers(dest="kafka_command", required=True)
    sub.add_parser("install", help="resolve the broker's jars with Maven (skipped when present)").set_defaults(
        func=_install
    )
    for name, func, text in (
        ("up", _up, "start a broker in the background and print its bootstrap servers"),
        ("down", _down, "stop the broker that `up` started and remove its folder"),
        ("status", _status, "say whether the broker runs (exit status 1 if not)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--state", type=Path, default=STATE, help="the state file of the broker `up` starts")
        if name == "up":
            p.add_argument("--heap", default="512m", help="the broker JVM's -Xmx")
        p.set_defaults(func=func)
    p = sub.add_parser("produce", help="write a folder of JSON-lines files (a generator's output) into a topic")
    p.add_argument("source", type=Path, help="the folder (its files in name order, each line one record)")
    p.add_argument("--topic", required=True, help="created with --partitions if it does not exist")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--key-field", help="the JSON field whose value keys each record (default: no key)")
    p.add_argument("--replace", action="store_true", help="delete the topic first if it exists")
    p.add_argument("--bootstrap", help="the broker (default: the one `misa kafka up` started)")
    p.add_argument("--state", type=Path, default=STATE, help="the state file of the broker `up` started")
    p.set_defaults(func=_produce)
    sub.add_parser(
        "jars", help="print Spark's Kafka connector's jars, comma-separated, for spark-submit --jars"
    ).set_defaults(func=print_connector_jars)
