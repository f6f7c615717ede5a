"""``redact`` masks every credential parameter of the fsspec backends the README lists, in any case."""

from __future__ import annotations

import pytest

from common.location import SECRET_PARAMETERS, redact

SECRET = "S3cr3t+/=x"  # what must never be shown

#: (URL, the secret parameter in it): every backend's credential parameters, as the brief and the
#: backends' documentation name them (s3fs, gcsfs, adlfs, webhdfs/hdfs, sftp), in the spellings users write.
CASES = [
    ("s3://bucket/ckpt", "key"),
    ("s3://bucket/ckpt", "secret"),
    ("s3://bucket/ckpt", "token"),
    ("s3://bucket/ckpt", "session_token"),
    ("s3a://bucket/ckpt", "AWS_SECRET_ACCESS_KEY"),
    ("s3a://bucket/ckpt", "aws_access_key_id"),
    ("s3a://bucket/ckpt", "AWS_SESSION_TOKEN"),
    ("https://bucket.s3.amazonaws.com/o", "X-Amz-Signature"),
    ("https://bucket.s3.amazonaws.com/o", "X-Amz-Security-Token"),
    ("gs://bucket/ckpt", "token"),
    ("gs://bucket/ckpt", "access_token"),
    ("gs://bucket/ckpt", "Access_Token"),
    ("gs://bucket/ckpt", "refresh_token"),
    ("https://storage.googleapis.com/b/o", "X-Goog-Signature"),
    ("https://storage.googleapis.com/b/o", "X-Goog-Credential"),
    ("abfs://container@acct.dfs.core.windows.net/x", "account_key"),
    ("abfs://container@acct.dfs.core.windows.net/x", "sas_token"),
    ("abfs://container@acct.dfs.core.windows.net/x", "SIG"),
    ("abfs://container@acct.dfs.core.windows.net/x", "credential"),
    ("abfs://container@acct.dfs.core.windows.net/x", "client_secret"),
    ("abfs://container@acct.dfs.core.windows.net/x", "connection_string"),
    ("webhdfs://namenode:9870/ckpt", "delegation"),
    ("hdfs://namenode:8020/ckpt", "Delegation"),
    ("hdfs://namenode:8020/ckpt", "token"),
    ("sftp://host/ckpt", "password"),
    ("sftp://host/ckpt", "PWD"),
    ("https://host/x", "signature"),
]


@pytest.mark.parametrize("base,name", CASES)
def test_a_secret_parameter_is_masked_wherever_it_stands(base, name):
    for query, shown in [
        (f"{name}={SECRET}", f"{name}=***"),  # alone
        (f"a=1&{name}={SECRET}&b=2", f"a=1&{name}=***&b=2"),  # among others, which stay
        (f"a=1;{name}={SECRET}", f"a=1;{name}=***"),  # ';' separates parameters too
    ]:
        assert redact(f"{base}?{query}") == f"{base}?{shown}"
        assert redact(f"upload to {base}?{query} failed") == f"upload to {base}?{shown} failed"
    assert redact(f"{base}#{name}={SECRET}") == f"{base}#{name}=***"  # a fragment carries them too


def test_the_table_covers_every_listed_backend_and_the_cases_cover_the_table():
    assert {"s3fs", "gcsfs", "adlfs", "webhdfs/hdfs", "sftp"} <= set(SECRET_PARAMETERS)
    tested = {name.lower() for _, name in CASES}
    for names in SECRET_PARAMETERS.values():
        for name in names:
            prefix = name.rstrip("*")
            assert any(t == name or (name.endswith("*") and t.startswith(prefix)) for t in tested), name


def test_a_connection_string_is_masked_whole():
    conn = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + SECRET + ";EndpointSuffix=x"
    assert redact(f"abfs://c/x?connection_string={conn}&y=1") == "abfs://c/x?connection_string=***&y=1"


@pytest.mark.parametrize(
    "url",
    [
        "s3://bucket/x?region=eu-west-1&version_aware=true",
        "https://acct.blob.core.windows.net/c?sv=2024&se=1&sp=r",  # SAS fields other than sig are no secret
        "s3://bucket/x?monkey=1&keys=2&tokenizer=3",  # names that only contain a secret name
        "s3://bucket/key=value/path",  # a path is not a query
    ],
)
def test_other_parameters_are_kept(url):
    assert redact(url) == url
