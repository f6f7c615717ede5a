"""One helper for every storage location: local forms, object-store URLs, redaction."""

import sys

import pytest
from fsspec.registry import _registry

from common.errors import LocationError
from common.location import local_path, parse, redact, spark_location


@pytest.mark.parametrize("form", ["{p}", "file:{p}", "file://{p}", "file://localhost{p}"])
def test_local_forms_are_one_location(tmp_path, form):
    loc = parse(form.format(p=tmp_path / "x"))
    assert loc.local == tmp_path / "x"
    assert loc.url == f"file://{tmp_path / 'x'}"
    assert spark_location(loc) == str(tmp_path / "x")


def test_relative_path_is_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse("ckpt").local == tmp_path / "ckpt"


def test_hadoop_object_store_schemes_map_to_fsspec():
    loc = parse("s3a://bucket/q/ckpt")
    assert (loc.local, loc.url, loc.given) == (None, "s3://bucket/q/ckpt", "s3a://bucket/q/ckpt")
    assert spark_location(loc) == "s3a://bucket/q/ckpt"  # Spark gets what the user wrote
    assert parse("s3a://bucket/q").child("misa-state").url == "s3://bucket/q/misa-state"


def test_a_file_url_on_another_host_and_a_remote_local_path_are_refused(tmp_path):
    with pytest.raises(LocationError, match="must be on this machine"):
        parse("file://otherhost/x")
    with pytest.raises(LocationError, match="not on this machine"):
        local_path("s3://bucket/x")
    with pytest.raises(LocationError, match="empty location"):
        parse("  ")


@pytest.mark.parametrize(
    "url,fix",
    [
        ("nosuchfs://h/x", "a scheme fsspec knows"),
        ("hdfs://namenode:8020/ckpt", r"libhdfs.*misa-pyspark\[hdfs\]"),  # no libhdfs here
        ("gs://bucket/ckpt", r"pip install 'misa-pyspark\[gcs\]'"),  # gcsfs and adlfs are not installed here
        ("abfs://container/ckpt", r"pip install 'misa-pyspark\[azure\]'"),
    ],
)
def test_a_location_without_a_usable_file_system_names_the_location_and_the_fix(url, fix, capfd):
    with pytest.raises(LocationError, match=rf"^no file system for {url}: .*{fix}") as error:
        parse(url).filesystem()
    assert "\n" not in str(error.value)
    assert capfd.readouterr().err == ""  # nothing from native code (libhdfs prints each JVM path it tries)


def test_a_missing_s3fs_names_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "s3fs", None)  # as if not installed (the test extra installs it)
    monkeypatch.delitem(_registry, "s3", raising=False)  # imported implementations
    with pytest.raises(LocationError, match=r"no file system for s3a://b/x: .*pip install 'misa-pyspark\[s3\]'"):
        parse("s3a://b/x").filesystem()


@pytest.mark.parametrize(
    "url,shown",
    [
        ("sftp://alice:s3cret@host/x", "sftp://alice:***@host/x"),
        (
            "https://acct.blob.core.windows.net/c?sv=2024&sig=ABCDEF&se=1",
            "https://acct.blob.core.windows.net/c?sv=2024&sig=***&se=1",
        ),
        ("abfs://container@acct.dfs.core.windows.net/x", "abfs://container@acct.dfs.core.windows.net/x"),
        ("s3://bucket/x", "s3://bucket/x"),
    ],
)
def test_credentials_are_redacted(url, shown):
    assert redact(url) == shown
    assert redact(f"upload to {url} failed") == f"upload to {shown} failed"
    assert str(parse(url)) == shown


def test_a_file_url_keeps_hash_question_mark_and_percent_in_its_path_as_hadoop_does(tmp_path):
    folder = tmp_path / "Shared Drive" / "josé #1 ?x %41"
    for text in (f"file://{folder}", f"file:{folder}", str(folder)):
        assert parse(text).local == folder.resolve()
    assert parse(parse(str(folder)).url).local == folder.resolve()  # a location's URL reads back as itself
