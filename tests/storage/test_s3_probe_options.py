"""Findings of an S3 probe (eighteenth session): each test failed before its fix.

An S3 "folder" marker (an empty object whose key ends in '/', as the AWS console's
"Create folder", s3fs and Hadoop's S3A write) inside a lake made listings yield a key
with an empty segment, and ``history``, ``tags``, GC and verify failed; a region or
key that is a number escaped as botocore's raw TypeError (a traceback in the CLI);
``connect_timeout=inf`` was accepted and then failed every request; a tab or newline
in a lake URI was dropped by ``urlsplit`` and another lake was opened.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from conftest import new_bucket

import merkle
from merkle.errors import UsageError


def _connect(endpoint: str, bucket: str, **options: Any) -> merkle.Connection:
    return merkle.connect(
        f"s3://{bucket}/lake", endpoint_url=endpoint, region_name="us-east-1", **options
    )


@pytest.mark.s3
def test_folder_markers_in_a_lake_are_not_lake_keys(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    conn = _connect(moto_endpoint, bucket)
    conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
    conn.tag("shop", "r1")
    raw = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    for marker in ("lake/", "lake/tags/shop/", "lake/leases/", "lake/blocks/", "lake/refs/shop/"):
        raw.put_object(Bucket=bucket, Key=marker, Body=b"")
    conn = _connect(moto_endpoint, bucket)
    assert [t.name for t in conn.tags("shop")] == ["r1"]
    assert [e.version for e in conn.history("shop")] == [1, 0]
    assert all(key and not key.endswith("/") for key in (i.key for i in conn.store.list()))
    merkle.gc(conn, grace="0s")
    assert merkle.verify(conn).ok
    assert conn.open_db("shop", tag="r1").get_records("t", [1]) == {1: {"id": 1}}


@pytest.mark.parametrize(
    "options",
    [
        {"region_name": 123},
        {"aws_access_key_id": 123, "aws_secret_access_key": "s"},
        {"aws_session_token": b"token"},
        {"connect_timeout": float("inf")},
        {"read_timeout": float("inf")},
        {"retry_base_delay": float("inf")},
    ],
)
def test_s3_options_of_the_wrong_kind_are_usage_errors(options: dict[str, Any]) -> None:
    name = next(iter(options))
    with pytest.raises(UsageError, match=f"S3 option {name} must be"):
        merkle.connect("s3://bucket/lake", endpoint_url="http://127.0.0.1:9", **options)


@pytest.mark.parametrize("uri", ["s3://bucket/team\tA", "s3://bucket/la\nke", "memory://a\rb"])
def test_a_control_character_in_a_lake_uri_is_refused(uri: str) -> None:
    with pytest.raises(UsageError, match="control character"):
        merkle.connect(uri, endpoint_url="http://127.0.0.1:9")
