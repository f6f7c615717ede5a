"""Locations as Spark resolves them: a scheme-less path is qualified with the session's Hadoop default FS.

On a cluster whose ``fs.defaultFS`` is HDFS (or ``viewfs``), Spark writes ``checkpointLocation="/x"`` to
``hdfs://nn/x``, not to the driver's disk. :func:`resolve_location` asks the JVM (Hadoop's
``FileSystem.makeQualified``) where a location really is; when that is not this machine's file system
and fsspec has no working implementation for its scheme (``viewfs``, or ``hdfs`` without libhdfs),
:class:`HadoopFileSystem` serves it through Spark's own JVM, so that recovery reads Spark's logs and
the default DFS copy (``<checkpoint>/misa-state``) lands where Spark's checkpoint is. File data moves
through py4j, which suits the small logs and markers; for large state on HDFS prefer fsspec's native
``hdfs://`` (pyarrow with libhdfs) when it is installed.
"""

from __future__ import annotations

import io
import re
from typing import Any

import fsspec
from fsspec.spec import AbstractFileSystem
from pyspark.sql import SparkSession

from common.location import Location, parse

#: Hadoop schemes that the JVM can serve when fsspec cannot.
JVM_SCHEMES = ("hdfs", "viewfs", "webhdfs", "ofs", "o3fs")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # two letters at least: C: is a drive


def resolve_location(location: str | Location, spark: SparkSession | None = None) -> Location:
    """``location`` where Spark puts it: a path without a scheme is qualified with the session's default
    FS (unchanged when that is the local file system, or when no session is active)."""
    parsed = parse(location)
    spark = spark or SparkSession.getActiveSession()
    if spark is None or parsed.local is None or _SCHEME.match(parsed.given.strip()):
        return parsed
    jvm, conf = spark._jvm, hadoop_conf(spark)
    path = jvm.org.apache.hadoop.fs.Path(parsed.given)
    qualified = str(path.getFileSystem(conf).makeQualified(path).toString())
    if qualified.startswith("file:"):
        return parsed
    scheme = qualified.split(":", 1)[0].lower()
    if scheme in JVM_SCHEMES and not _fsspec_serves(scheme):
        HadoopFileSystem.use_session(spark)
        fsspec.register_implementation(scheme, HadoopFileSystem, clobber=True)
    return Location(parsed.given, qualified, None)


def hadoop_conf(spark: SparkSession) -> Any:
    """The Hadoop configuration Spark's queries use (the context's, with the session's SQL conf over it)."""
    return spark._jsparkSession.sessionState().newHadoopConf()  # type: ignore[union-attr]


def _fsspec_serves(scheme: str) -> bool:
    """Whether fsspec has a loadable implementation of ``scheme`` other than this module's."""
    try:
        cls = fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError):
        return False
    if cls is HadoopFileSystem:
        return False
    if scheme in ("hdfs", "viewfs"):  # pyarrow's HDFS needs libhdfs, found only when it connects
        try:
            from pyarrow import fs as pafs

            pafs.HadoopFileSystem("default")
        except (ImportError, OSError):
            return False
    return True


class HadoopFileSystem(AbstractFileSystem):
    """An fsspec file system over Hadoop's ``FileSystem`` in Spark's JVM (paths are full URLs)."""

    protocol = JVM_SCHEMES
    root_marker = ""
    _session: SparkSession | None = None

    @classmethod
    def use_session(cls, spark: SparkSession) -> None:
        cls._session = spark

    @classmethod
    def _strip_protocol(cls, path: str) -> str:  # keep scheme and authority: Hadoop needs both
        text = path if isinstance(path, str) else str(path)
        return text.rstrip("/") if len(text) > 1 else text

    def _jvm(self, path: str) -> tuple[Any, Any]:
        """Spark's JVM and Hadoop configuration."""
        spark = self._session or SparkSession.getActiveSession()
        if spark is None:
            raise OSError(f"{path} is served through Spark's JVM, but no Spark session is active")
        return spark._jvm, hadoop_conf(spark)

    def _fs_path(self, path: str) -> tuple[Any, Any]:
        jvm, conf = self._jvm(path)
        jpath = jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(conf), jpath

    @staticmethod
    def _entry(status: Any) -> dict[str, Any]:
        kind = "directory" if status.isDirectory() else "file"
        return {"name": str(status.getPath().toString()), "size": int(status.getLen()), "type": kind,
                "islink": bool(status.isSymlink())}  # fmt: skip

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        fs, jpath = self._fs_path(path)
        if not fs.exists(jpath):
            raise FileNotFoundError(path)
        entries = [self._entry(s) for s in fs.listStatus(jpath)]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        fs, jpath = self._fs_path(path)
        if not fs.exists(jpath):
            raise FileNotFoundError(path)
        return self._entry(fs.getFileStatus(jpath))

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        fs, jpath = self._fs_path(path)
        if not fs.exists(jpath):
            raise FileNotFoundError(path)
        stream = fs.open(jpath)
        try:
            data = bytes(self._jvm(path)[0].org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()
        return data[start:end]

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        fs, jpath = self._fs_path(path)
        stream = fs.create(jpath, True)
        try:
            stream.write(bytearray(value))
        finally:
            stream.close()

    def rm_file(self, path: str) -> None:
        fs, jpath = self._fs_path(path)
        if not fs.delete(jpath, False) and not fs.exists(jpath):
            raise FileNotFoundError(path)

    def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Rename ``path1`` over ``path2`` (Hadoop's rename does not replace a file: the old one goes first)."""
        fs, source = self._fs_path(path1)
        target = self._fs_path(path2)[1]
        if not fs.rename(source, target):
            fs.delete(target, False)
            if not fs.rename(source, target):
                raise OSError(f"could not rename {path1} to {path2}")

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        fs, jpath = self._fs_path(path)
        fs.mkdirs(jpath)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.makedirs(path, exist_ok=True)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> io.IOBase:
        if "r" in mode:
            return io.BytesIO(self.cat_file(path))
        return _WriteOnClose(self, path)


class _WriteOnClose(io.BytesIO):
    """A file opened for writing: its bytes go to the JVM file system in one piece when it is closed."""

    def __init__(self, fs: HadoopFileSystem, path: str):
        super().__init__()
        self._target = (fs, path)

    def close(self) -> None:
        if not self.closed:
            fs, path = self._target
            fs.pipe_file(path, self.getvalue())
        super().close()


def hadoop_local_path(spark: SparkSession, option: str) -> str | None:
    """The local folder Hadoop's ``Path`` makes of ``option`` (a ``checkpointLocation``), or None if not local."""
    path = spark._jvm.org.apache.hadoop.fs.Path(option)
    uri = path.getFileSystem(hadoop_conf(spark)).makeQualified(path).toUri()
    return str(uri.getPath()) if str(uri.getScheme()) == "file" else None
