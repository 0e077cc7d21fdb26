"""A lake whose S3 bucket is gone (deleted while in use, or never made) or refuses access.

A missing bucket answers nothing about keys: read as "no such key" it made the
journal look cut short ("the journal was altered from outside"), a block look
lost, and a lake look new. Every operation must name the bucket instead, with
``StorageError``, and write nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from conftest import new_bucket

import merkle
from merkle.errors import StorageError
from merkle.storage import open_store
from merkle.storage.s3 import S3Store

pytestmark = pytest.mark.s3

_WRITES = ("PutObject", "DeleteObject", "DeleteObjects", "CopyObject")


def _options(endpoint: str, **more: Any) -> dict[str, Any]:
    return {"endpoint_url": endpoint, "region_name": "us-east-1", **more}


def _delete_bucket(endpoint: str, bucket: str) -> None:
    raw = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    keys = [{"Key": o["Key"]} for o in raw.list_objects_v2(Bucket=bucket).get("Contents", [])]
    if keys:
        raw.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    raw.delete_bucket(Bucket=bucket)


def _assert_names_the_bucket(call: Callable[[], object], bucket: str, what: str) -> None:
    with pytest.raises(StorageError) as caught:
        call()
    message = str(caught.value)
    assert f"S3 bucket {bucket!r} does not exist" in message, (what, message)
    assert "aws s3 mb" in message, (what, message)
    assert caught.value.definite, what


def test_a_bucket_deleted_in_use_is_named_not_taken_for_damage(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    uri = f"s3://{bucket}/lake"
    conn = merkle.connect(uri, **_options(moto_endpoint))
    other = merkle.connect(uri, **_options(moto_endpoint))
    db = conn.create_db("shop").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    cold = other.open_db("shop")  # has read no block of the table: its read must ask S3
    # The commit's idle writer lease goes now, not in the background 2 s on (a delete
    # counted below when the operations took longer than that, under load).
    conn._writer.release_idle()
    _delete_bucket(moto_endpoint, bucket)

    writes: list[str] = []
    conn.store.client.meta.events.register(
        "before-call.s3",
        lambda model, **_: writes.append(model.name) if model.name in _WRITES else None,
    )
    operations: dict[str, Callable[[], object]] = {
        "history": lambda: conn.history("shop"),  # was: "the journal was altered from outside"
        "open_db": lambda: conn.open_db("shop"),  # was: the cached head, as if nothing happened
        "open_db(version=0)": lambda: conn.open_db("shop", version=0),
        "list_dbs": conn.list_dbs,
        "read": lambda: cold.get_records("t", [1]),  # was: "block ... is missing"
        "commit": lambda: db.write("t", [{"k": 2}]).commit(),
        "gc": lambda: merkle.gc(conn, keep_versions=1),
        "verify": lambda: merkle.verify(conn),
        "connect": lambda: merkle.connect(uri, **_options(moto_endpoint)),  # was: put a config
        "connect(create=False)": lambda: merkle.connect(
            uri, create=False, **_options(moto_endpoint)
        ),
    }
    for what, operation in operations.items():
        _assert_names_the_bucket(operation, bucket, what)
    assert writes == []
    conn.close()
    other.close()


def test_a_missing_bucket_names_the_bucket_and_endpoint(moto_endpoint: str) -> None:
    with open_store("s3://no-such-bucket-here/lake", **_options(moto_endpoint)) as store:
        assert isinstance(store, S3Store)
        calls: dict[str, Callable[[], object]] = {
            "get": lambda: store.get("k"),
            "get_range": lambda: store.get_range("k", 0, 4),
            "stat": lambda: store.stat("k"),
            "exists": lambda: store.exists("k"),
            "put": lambda: store.put("k", b"v"),
            "put_if_absent": lambda: store.put_if_absent("k", b"v"),
            "list": lambda: list(store.list()),
            "list_prefixes": lambda: store.list_prefixes(),
            "touch": lambda: store.touch("k"),
            "delete": lambda: store.delete("k"),
        }
        for what, call in calls.items():
            _assert_names_the_bucket(call, "no-such-bucket-here", what)
            with pytest.raises(StorageError, match=moto_endpoint):
                call()


@pytest.fixture
def refused(moto_endpoint: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A bucket, and the credentials of an IAM user without any policy, while moto checks IAM."""
    authorization = pytest.importorskip("moto.core.authorization")
    bucket = new_bucket(moto_endpoint)
    iam = boto3.client("iam", endpoint_url=moto_endpoint, region_name="us-east-1")
    user = f"nobody-{uuid.uuid4().hex[:12]}"
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    credentials = {
        "aws_access_key_id": key["AccessKeyId"],
        "aws_secret_access_key": key["SecretAccessKey"],
    }
    with authorization.enable_iam_authentication():
        yield bucket, credentials


def test_a_bucket_that_refuses_access_says_so(
    moto_endpoint: str, refused: tuple[str, dict[str, str]]
) -> None:
    bucket, credentials = refused
    options = _options(moto_endpoint, max_attempts=1, **credentials)
    with pytest.raises(StorageError, match=r"AccessDenied.*check the credentials"):
        merkle.connect(f"s3://{bucket}/lake", **options)
    with open_store(f"s3://{bucket}/lake", **options) as store:
        # A HEAD's 403 has no body, so no code: a refusal all the same, said as one.
        heads: dict[str, Callable[[], object]] = {
            "stat": lambda: store.stat("k"),
            "exists": lambda: store.exists("k"),
        }
        for what, call in heads.items():
            with pytest.raises(StorageError, match="check the credentials") as caught:
                call()
            assert "does not exist" not in str(caught.value), what
