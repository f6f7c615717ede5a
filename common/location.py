"""One place that understands storage locations: checkpoint locations, DFS URLs, sink roots.

A location is anything Spark or fsspec accepts: a plain path (``/x``, ``x``), Hadoop's ``file:/x``,
``file:///x``, or a URL with a scheme (``s3://``, ``s3a://``, ``gs://``, ``abfs://``, ``hdfs://``,
``sftp://``). :func:`parse` turns it into a :class:`Location` with one canonical fsspec URL, the
local path when it is on this machine, and a form safe to print (:func:`redact`).
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit, urlunsplit

import fsspec

from .errors import LocationError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
#: Hadoop spellings of object stores that fsspec knows under another name.
_FSSPEC_SCHEMES = {"s3a": "s3", "s3n": "s3"}


@dataclass(frozen=True)
class Location:
    """A parsed storage location.

    ``url`` is the canonical fsspec URL (``file:///abs/path`` for local ones); ``local`` the local path
    or None; ``given`` the text as the user wrote it (what Spark is given).
    """

    given: str
    url: str
    local: Path | None

    @property
    def is_local(self) -> bool:
        return self.local is not None

    def child(self, *parts: str) -> Location:
        """The location of ``parts`` below this one."""
        if self.local is not None:
            return local_location(self.local.joinpath(*parts))
        joined = "/".join([self.url.rstrip("/"), *parts])
        return Location(joined, joined, None)

    def filesystem(self) -> tuple[Any, str]:
        """The fsspec file system and the path within it; a one-line error naming the fix (the pip extra that
        installs the scheme's implementation) when no file system serves the scheme."""
        scheme = self.url.split("://", 1)[0].lower() if "://" in self.url else "file"
        try:
            with _native_stderr_held(scheme in NATIVE_SCHEMES):
                return fsspec.core.url_to_fs(self.url)
        except (ImportError, ValueError, OSError) as exc:  # no implementation, or it cannot load (libhdfs)
            cause = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise LocationError(f"no file system for {redact(self.given)}: {_fix(scheme, cause)}") from exc

    def __str__(self) -> str:
        return redact(self.url)


#: The pip extra of this package that installs the fsspec implementation of a scheme.
EXTRAS = {
    "s3": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "abfs": "azure",
    "abfss": "azure",
    "az": "azure",
    "adl": "azure",
    "hdfs": "hdfs",
}
PACKAGE = "misa-pyspark"
#: Schemes whose implementation loads native libraries that report their failures on the process's stderr.
NATIVE_SCHEMES = ("hdfs", "viewfs")


def _fix(scheme: str, cause: str) -> str:
    """What to do when no file system serves ``scheme`` (``cause``: the first line of fsspec's error)."""
    extra = EXTRAS.get(scheme)
    if extra is None:
        return f"{cause}; use a path or a URL of a scheme fsspec knows (file, s3, gs, abfs, hdfs, ...)"
    install = f"pip install '{PACKAGE}[{extra}]'"
    if scheme != "hdfs":
        return f"{cause}: {install}"
    return (
        f"{cause}: pyarrow's HadoopFileSystem needs a Hadoop client with libhdfs and a JVM ({install}, then set "
        f"JAVA_HOME, HADOOP_HOME and CLASSPATH=$(hadoop classpath --glob)); a job's checkpoint location given as a "
        f"path, on a cluster whose default file system is HDFS, is reached through Spark's JVM without it"
    )


@contextmanager
def _native_stderr_held(hold: bool) -> Iterator[None]:
    """With ``hold``, what native code writes to file descriptor 2 meanwhile (libhdfs prints a line per JVM
    path it tries) is dropped, so that a failure is reported once, by the error raised."""
    if not hold:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def local_location(path: str | Path) -> Location:
    resolved = Path(path).expanduser().resolve()
    return Location(str(path), f"file://{resolved}", resolved)


def _file_url_parts(text: str) -> tuple[str, str]:
    """Host and path of a ``file:`` URL, read as Hadoop reads one: ``#``, ``?`` and ``%`` are part of the path."""
    rest = text[len("file:") :]
    if not rest.startswith("//"):
        return "", rest
    host, slash, path = rest[2:].partition("/")
    return host, slash + path


def parse(location: str | Path | Location) -> Location:
    """The :class:`Location` of ``location`` (a path, ``file:/x``, ``file:///x`` or any URL)."""
    if isinstance(location, Location):
        return location
    if isinstance(location, Path):
        return local_location(location)
    text = location.strip()
    if not text:
        raise LocationError("an empty location: give a path or a URL such as file:///data/ckpt or s3://bucket/ckpt")
    match = _SCHEME.match(text)
    if match is None or len(match.group(1)) == 1:  # no scheme, or a Windows drive letter
        resolved = local_location(text)
        return Location(text, resolved.url, resolved.local)
    scheme = match.group(1).lower()
    if scheme == "file":
        host, path = _file_url_parts(text)
        if host not in ("", "localhost"):
            raise LocationError(f"{redact(text)} names host {host!r}: a file: location must be on this machine")
        resolved = local_location(path)
        return Location(text, resolved.url, resolved.local)
    url = _FSSPEC_SCHEMES.get(scheme, scheme) + text[len(scheme) :]
    return Location(text, url, None)


def local_path(location: str | Path | Location) -> Path:
    """The local path of a location that must be on this machine; a clear error otherwise."""
    parsed = parse(location)
    if parsed.local is None:
        raise LocationError(f"{parsed} is not on this machine's file system: give a local path or file:// URL")
    return parsed.local


def spark_location(location: str | Path | Location) -> str:
    """The location as Spark's ``checkpointLocation`` option takes it: the absolute path of a local
    location (Spark reads ``file://`` URLs too, but a path is what its own logs print), else as given."""
    parsed = parse(location)
    return str(parsed.local) if parsed.local is not None else parsed.given


#: URL parameters that carry credentials, by the fsspec backend (or URL kind) that reads them; compared
#: case-insensitively, a trailing ``*`` stands for any rest of the name.
SECRET_PARAMETERS: dict[str, tuple[str, ...]] = {
    "s3fs": ("key", "secret", "token", "session_token", "aws_*", "x-amz-*"),
    "gcsfs": ("token", "access_token", "refresh_token", "client_secret", "x-goog-*"),
    "adlfs": ("account_key", "sas_token", "sig", "credential", "client_secret", "connection_string"),
    "webhdfs/hdfs": ("delegation", "token"),
    "sftp": ("password",),
    "signed URLs and others": ("signature", "pwd"),
}


def _secret_parameter_pattern(table: dict[str, tuple[str, ...]]) -> re.Pattern[str]:
    """A pattern matching ``name=value`` of every secret parameter in ``table``, at the start of a query
    (or fragment) or after ``&`` or ``;``; the value runs to the next ``&`` (a connection string's ``;``
    parts stay in it)."""
    names = sorted({name.lower() for names in table.values() for name in names})
    alternatives = "|".join(re.escape(n[:-1]) + r"[\w.-]+" if n.endswith("*") else re.escape(n) for n in names)
    return re.compile(rf"(?i)(?:^|(?<=[&;]))({alternatives})=[^&\s]*")


_URL_SECRET = _secret_parameter_pattern(SECRET_PARAMETERS)


def _mask_parameters(part: str) -> str:
    """A URL's query or fragment with the values of its secret parameters replaced by ``***``."""
    return _URL_SECRET.sub(lambda m: f"{m.group(1)}=***", part)


def redact(text: str) -> str:
    """``text`` with the credentials a URL may carry masked: ``user:pass@`` and the values of secret
    parameters (:data:`SECRET_PARAMETERS`) in its query or fragment. Works on a bare URL and on a message
    that contains URLs."""

    def one(url: str) -> str:
        try:
            parts = urlsplit(url)
        except ValueError:
            return url
        netloc = parts.netloc
        userinfo, at, host = netloc.rpartition("@")
        if at and ":" in userinfo:  # a password; a bare user name (abfs' container@account) is no secret
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
        return urlunsplit(
            (parts.scheme, netloc, parts.path, _mask_parameters(parts.query), _mask_parameters(parts.fragment))
        )

    return re.sub(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+", lambda m: one(m.group(0)), text)
