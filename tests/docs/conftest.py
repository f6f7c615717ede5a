"""A fresh folder that both Python and the test session's Spark JVM take relative paths in, as a user's script
started there does (the JVM's own working directory is where pytest started)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest


@pytest.fixture
def user_folder(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    jvm = spark.sparkContext._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    before = local.getWorkingDirectory()
    monkeypatch.chdir(tmp_path)
    local.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(str(tmp_path)))
    try:
        yield tmp_path
    finally:
        local.setWorkingDirectory(before)


@pytest.fixture(autouse=True)
def jobs_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close the jobs a page builds but does not run (an example of a constructor), as a script's end would leave
    nothing running: their commit threads would outlive the test."""
    from misa.job import StatefulJob

    opened: list[StatefulJob] = []
    init, close = StatefulJob.__init__, StatefulJob.close

    def tracked_init(self: StatefulJob, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        opened.append(self)

    def tracked_close(self: StatefulJob, *args, **kwargs) -> None:
        if self in opened:
            opened.remove(self)
        close(self, *args, **kwargs)

    monkeypatch.setattr(StatefulJob, "__init__", tracked_init)
    monkeypatch.setattr(StatefulJob, "close", tracked_close)
    yield
    for job in list(opened):
        job.close()
