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
