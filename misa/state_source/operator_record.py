"""The operator a state was written by, kept beside the state's DFS copy so that a reader can decode it.

A job records its operator at every start (:func:`record_operator`): the operator pickled as worker processes get
it (``operator-<sha16>.pickle``, written once per definition) and ``operator.json`` naming that file and the
operator's signature, written last. The state data source (:mod:`misa.state_source.sources`) loads it back with
:func:`load_operator` and restores it from a version's metadata, so the operator's own codecs decode its keys and
values. Unpickling runs code: read states you trust, as you would run their jobs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
from dataclasses import dataclass
from typing import Any

from checkpoint.retry import RetryPolicy
from common.location import parse
from misa.exceptions import StateSourceError
from misa.parallel.pool import worker_copy

RECORD = "operator.json"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorRecord:
    """What ``operator.json`` says: the pickled operator's file and the operator's signature."""

    pickle_file: str
    signature: dict[str, Any]


def record_operator(dfs_url: str, operator: Any, signature: dict[str, Any], retry: RetryPolicy = RetryPolicy()) -> None:
    """Write ``operator`` (pickled) and its record at the state's DFS location ``dfs_url`` (its root, above any
    partition folders), each write retried as the commit's are; the pickle is written only when this definition's
    is not there yet. An operator that cannot be pickled is recorded as such (a read then says why)."""
    fs, root = parse(dfs_url).filesystem()
    root = root.rstrip("/")
    record: dict[str, Any] = {"signature": signature}
    try:
        data = worker_copy(operator)
    except (TypeError, AttributeError, pickle.PicklingError) as exc:  # holds a lock, a client, a connection
        record["unpicklable"] = f"{type(operator).__name__} cannot be pickled ({type(exc).__name__}: {exc})"
        log.warning("the state data sources cannot read this state: %s", record["unpicklable"])
    else:
        record["pickle"] = name = f"operator-{hashlib.sha256(data).hexdigest()[:16]}.pickle"
        retry.call(f"write of {parse(dfs_url).given}/{name}", lambda: _write_once(fs, f"{root}/{name}", data))
    text = json.dumps(record, sort_keys=True).encode()
    retry.call(f"write of {parse(dfs_url).given}/{RECORD}", lambda: _write(fs, f"{root}/{RECORD}", text))


def _write_once(fs: Any, path: str, data: bytes) -> None:
    if not fs.exists(path):
        _write(fs, path, data)


def _write(fs: Any, path: str, data: bytes) -> None:
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "wb") as out:
        out.write(data)


def read_record(dfs_url: str) -> OperatorRecord:
    """The operator record at ``dfs_url``; a :class:`StateSourceError` saying why when there is none."""
    fs, root = parse(dfs_url).filesystem()
    path = f"{root.rstrip('/')}/{RECORD}"
    if not fs.exists(path):
        raise StateSourceError(
            f"{parse(dfs_url).given} has no {RECORD}: its state was written before misa recorded the operator with "
            "it; run the query once with this release (one batch records it), then read it"
        )
    try:
        with fs.open(path, "rb") as f:
            raw = json.loads(f.read())
        why, record = raw.get("unpicklable"), OperatorRecord(str(raw.get("pickle")), dict(raw["signature"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StateSourceError(
            f"{parse(dfs_url).given}/{RECORD} is damaged ({exc}): run the query once to rewrite it"
        ) from exc
    if why:
        raise StateSourceError(f"the operator of {parse(dfs_url).given} was not recorded: {why}")
    return record


def operator_bytes(dfs_url: str, record: OperatorRecord) -> bytes:
    """The pickled operator the record names."""
    fs, root = parse(dfs_url).filesystem()
    path = f"{root.rstrip('/')}/{record.pickle_file}"
    try:
        with fs.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError as exc:
        raise StateSourceError(
            f"{parse(dfs_url).given}/{record.pickle_file} is missing: run the query once to rewrite it"
        ) from exc


def load_operator(data: bytes) -> Any:
    """The operator pickled in ``data``; a :class:`StateSourceError` naming the module to make importable when its
    code is not found here."""
    try:
        return pickle.loads(data)
    except (ImportError, AttributeError) as exc:
        raise StateSourceError(
            f"cannot load the operator that wrote this state ({type(exc).__name__}: {exc}): the code of its classes "
            "must be importable where the state is read (the job's modules on the PYTHONPATH)"
        ) from exc
