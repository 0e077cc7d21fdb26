"""What only the S3 store must show: exact conditional puts under faults, retries, paging.

Every test talks HTTP to the session's moto server on 127.0.0.1; faults are
injected with ``tests/s3faults.py`` on the store's own boto3 client.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from conftest import new_bucket
from s3faults import inject_s3_faults, seed_moto_objects, set_moto_mtime

from merkle.errors import IntegrityError, StorageError, UsageError
from merkle.storage import open_store
from merkle.storage.s3 import S3Store

pytestmark = pytest.mark.s3


def open_s3(endpoint: str, bucket: str, prefix: str = "lake", **options: Any) -> S3Store:
    options = {"endpoint_url": endpoint, "region_name": "us-east-1", **options}
    store = open_store(f"s3://{bucket}/{prefix}", **options)
    assert isinstance(store, S3Store)
    return store


@pytest.fixture
def bucket(moto_endpoint: str) -> str:
    return new_bucket(moto_endpoint)


@pytest.fixture
def s3(moto_endpoint: str, bucket: str) -> Iterator[S3Store]:
    """A store with quick retries: three attempts, no waiting between them."""
    with open_s3(moto_endpoint, bucket, max_attempts=3, retry_base_delay=0) as store:
        yield store


@pytest.fixture
def raw(moto_endpoint: str) -> Any:
    """A plain boto3 client, to look at the bucket behind the store's back."""
    return boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")


def count_calls(store: S3Store, operation: str) -> list[int]:
    """A list that grows by one for every ``operation`` response the store's client sees."""
    calls: list[int] = []
    store.client.meta.events.register(
        f"after-call.s3.{operation}", lambda **_: calls.append(1), unique_id=f"count-{operation}"
    )
    return calls


# -- conditional puts under faults ---------------------------------------------------------


def test_timeout_after_send_then_412_reads_back_and_wins(s3: S3Store) -> None:
    with inject_s3_faults(s3, "PutObject", kind="timeout", times=1, after_send=True) as faults:
        assert s3.put_if_absent("refs/db/1", b"mine") is True
    assert (faults.fired, faults.sent) == (1, 1)  # the first attempt did write
    assert s3.get("refs/db/1") == b"mine"


def test_timeout_after_send_when_another_writer_won_is_false(s3: S3Store) -> None:
    s3.put("refs/db/1", b"theirs")
    with inject_s3_faults(s3, "PutObject", kind="timeout", times=1, after_send=True) as faults:
        assert s3.put_if_absent("refs/db/1", b"mine") is False
    assert faults.fired == 1
    assert s3.get("refs/db/1") == b"theirs"


def test_5xx_after_send_then_412_with_identical_bytes_is_true(s3: S3Store) -> None:
    with inject_s3_faults(s3, "PutObject", kind="5xx", times=1, after_send=True):
        assert s3.put_if_absent("k", b"same") is True
    assert s3.get("k") == b"same"


def test_timeout_before_send_is_retried_without_read_back(s3: S3Store) -> None:
    gets = count_calls(s3, "GetObject")
    with inject_s3_faults(s3, "PutObject", kind="timeout", times=1, after_send=False) as faults:
        assert s3.put_if_absent("k", b"v") is True
    assert (faults.fired, faults.sent) == (1, 0)
    assert gets == []  # nothing was uncertain, so nothing was read back


def test_a_clean_412_is_false_without_read_back(s3: S3Store) -> None:
    s3.put("k", b"first")
    gets = count_calls(s3, "GetObject")
    assert s3.put_if_absent("k", b"first") is False  # equal bytes, but surely not ours
    assert gets == []


def test_5xx_on_every_attempt_is_indefinite(s3: S3Store) -> None:
    with (
        inject_s3_faults(s3, "PutObject", kind="5xx", times=3, after_send=True) as faults,
        pytest.raises(StorageError, match=r"'k'.*3 attempts.*may or may not") as caught,
    ):
        s3.put_if_absent("k", b"v")
    assert caught.value.definite is False
    assert faults.fired == 3
    assert s3.get("k") == b"v"  # it did happen: that is why the error could not say


def test_5xx_before_send_on_every_attempt_is_still_indefinite(s3: S3Store) -> None:
    # The client cannot tell a 5xx that did nothing from one that wrote.
    with (
        inject_s3_faults(s3, "PutObject", kind="5xx", times=3, after_send=False),
        pytest.raises(StorageError) as caught,
    ):
        s3.put_if_absent("k", b"v")
    assert caught.value.definite is False
    assert not s3.exists("k")


def test_connection_refused_on_every_attempt_is_definite(s3: S3Store) -> None:
    with (
        inject_s3_faults(s3, "PutObject", kind="connection", times=3, after_send=False),
        pytest.raises(StorageError) as caught,
    ):
        s3.put_if_absent("k", b"v")
    assert caught.value.definite is True
    assert not s3.exists("k")


def test_a_403_is_not_retried_and_is_definite(s3: S3Store) -> None:
    with (
        inject_s3_faults(s3, "PutObject", kind="403", times=5, after_send=False) as faults,
        pytest.raises(StorageError, match="credentials") as caught,
    ):
        s3.put_if_absent("k", b"v")
    assert caught.value.definite is True
    assert faults.fired == 1


def test_conditional_request_conflict_is_retried(s3: S3Store) -> None:
    with inject_s3_faults(s3, "PutObject", kind="409", times=2, after_send=False) as faults:
        assert s3.put_if_absent("k", b"v") is True
    assert faults.fired == 2
    assert s3.get("k") == b"v"


def test_taken_then_deleted_before_read_back_is_indefinite(s3: S3Store, raw: Any) -> None:
    s3.put("k", b"theirs")

    def delete_first(**_: Any) -> None:  # someone deletes the key before the read-back
        raw.delete_object(Bucket=s3.bucket, Key=s3.prefix + "k")

    s3.client.meta.events.register("before-send.s3.GetObject", delete_first, unique_id="del")
    with (
        inject_s3_faults(s3, "PutObject", kind="timeout", times=1, after_send=True),
        pytest.raises(StorageError, match="indeterminate") as caught,
    ):
        s3.put_if_absent("k", b"mine")
    assert caught.value.definite is False


def test_a_store_without_conditional_writes_is_told_so(s3: S3Store) -> None:
    with (
        inject_s3_faults(s3, "PutObject", kind="501", times=5, after_send=False) as faults,
        pytest.raises(StorageError, match="If-None-Match") as caught,
    ):
        s3.put_if_absent("k", b"v")
    assert caught.value.definite is True
    assert faults.fired == 1  # not worth retrying


def test_check_conditional_writes_passes_on_a_store_that_has_them(s3: S3Store) -> None:
    s3.check_conditional_writes()
    assert list(s3.list()) == []  # the probe is gone


def test_check_conditional_writes_catches_a_store_that_ignores_the_header(s3: S3Store) -> None:
    def drop_if_none_match(params: dict[str, Any], **_: Any) -> None:
        params["headers"].pop("If-None-Match", None)

    s3.client.meta.events.register(
        "before-call.s3.PutObject", drop_if_none_match, unique_id="drop-if-none-match"
    )
    with pytest.raises(StorageError, match="not honoured"):
        s3.check_conditional_writes()
    assert list(s3.list()) == []


def test_error_messages_name_the_code_not_botocore_internals(s3: S3Store) -> None:
    with (
        inject_s3_faults(s3, "GetObject", kind="5xx", times=3),
        pytest.raises(StorageError) as caught,
    ):
        s3.get("k")
    message = str(caught.value)
    assert "InternalError (HTTP 500)" in message
    assert "'k'" in message
    assert s3.uri in message
    assert "max retries" not in message


# -- retries of plain requests ---------------------------------------------------------------


def test_throttling_is_retried(s3: S3Store) -> None:
    with inject_s3_faults(s3, "PutObject", kind="slowdown", times=2, after_send=False) as faults:
        s3.put("k", b"v")
    assert faults.fired == 2
    with inject_s3_faults(s3, "GetObject", kind="slowdown", times=2) as faults:
        assert s3.get("k") == b"v"
    assert faults.fired == 2


def test_throttling_past_max_attempts_is_a_definite_storage_error(s3: S3Store) -> None:
    with (
        inject_s3_faults(s3, "PutObject", kind="slowdown", times=3, after_send=False),
        pytest.raises(StorageError, match="SlowDown") as caught,
    ):
        s3.put("k", b"v")
    assert caught.value.definite is True


def test_read_timeout_on_get_is_retried(s3: S3Store) -> None:
    s3.put("k", b"v")
    with inject_s3_faults(s3, "GetObject", kind="timeout", times=2) as faults:
        assert s3.get("k") == b"v"
    assert faults.fired == 2


def test_a_put_whose_every_attempt_timed_out_is_indefinite(s3: S3Store) -> None:
    with (
        inject_s3_faults(s3, "PutObject", kind="timeout", times=3),
        pytest.raises(StorageError) as caught,
    ):
        s3.put("k", b"v")
    assert caught.value.definite is False


def test_retries_are_off_with_max_attempts_1(moto_endpoint: str, bucket: str) -> None:
    with open_s3(moto_endpoint, bucket, max_attempts=1) as store:
        with (
            inject_s3_faults(store, "GetObject", kind="slowdown", times=2) as faults,
            pytest.raises(StorageError),
        ):
            store.get("k")
        assert faults.fired == 1


# -- paging and batches ----------------------------------------------------------------------


def test_list_pages_past_1000_keys(s3: S3Store) -> None:
    keys = [f"p/{n:05d}/x" for n in range(2300)]
    seed_moto_objects(s3, ((key, b"") for key in reversed(keys)))
    pages = count_calls(s3, "ListObjectsV2")
    assert [info.key for info in s3.list("p/")] == keys
    assert len(pages) == 3
    assert s3.list_prefixes("p/") == [f"{n:05d}" for n in range(2300)]
    assert [info.key for info in s3.list("p/0229")] == [f"p/{n:05d}/x" for n in range(2290, 2300)]


def test_delete_many_past_1000_keys(s3: S3Store) -> None:
    keys = [f"blocks/{n:05d}" for n in range(2100)]
    seed_moto_objects(s3, ((key, b"x") for key in keys))
    batches = count_calls(s3, "DeleteObjects")
    s3.delete_many([*keys[:2050], "blocks/missing", keys[0]])
    assert len(batches) == 3  # 2051 distinct keys: 1000 + 1000 + 51
    assert [info.key for info in s3.list()] == keys[2050:]


# -- touch, ranges, keys under the prefix ----------------------------------------------------


def test_touch_refreshes_last_modified(s3: S3Store, raw: Any) -> None:
    s3.put("blocks/b", b"payload")
    day_ago = time.time() - 86400
    set_moto_mtime(s3, "blocks/b", day_ago)
    head = raw.head_object(Bucket=s3.bucket, Key="lake/blocks/b")
    assert head["LastModified"].timestamp() == pytest.approx(day_ago, abs=1)
    before = time.time()
    s3.touch("blocks/b")
    head = raw.head_object(Bucket=s3.bucket, Key="lake/blocks/b")
    assert head["LastModified"].timestamp() >= before - 2
    assert raw.get_object(Bucket=s3.bucket, Key="lake/blocks/b")["Body"].read() == b"payload"


def test_keys_live_under_the_prefix(s3: S3Store, raw: Any) -> None:
    s3.put("refs/db/1", b"v")
    raw.put_object(Bucket=s3.bucket, Key="outside", Body=b"not ours")
    raw.put_object(Bucket=s3.bucket, Key="lakeside/x", Body=b"not ours either")
    listed = raw.list_objects_v2(Bucket=s3.bucket)["Contents"]
    assert sorted(item["Key"] for item in listed) == ["lake/refs/db/1", "lakeside/x", "outside"]
    assert [info.key for info in s3.list()] == ["refs/db/1"]
    assert s3.list_prefixes() == ["refs"]


def test_a_bucket_without_prefix(moto_endpoint: str, bucket: str) -> None:
    with open_store(f"s3://{bucket}", endpoint_url=moto_endpoint) as store:
        assert store.uri == f"s3://{bucket}"
        store.put("a/b", b"1")
        assert [info.key for info in store.list()] == ["a/b"]
        assert store.list_prefixes() == ["a"]


def test_get_range_sends_a_range_header(s3: S3Store) -> None:
    s3.put("r", bytes(range(100)))
    ranges: list[bytes] = []

    def record(request: Any, **_: Any) -> None:
        ranges.append(request.headers.get("Range"))

    s3.client.meta.events.register("before-send.s3.GetObject", record, unique_id="ranges")
    assert s3.get_range("r", 10, 5) == bytes(range(10, 15))
    assert ranges == [b"bytes=10-14"]


# -- options and pickling --------------------------------------------------------------------


def test_pickle_carries_endpoint_and_options_but_no_client(moto_endpoint: str, bucket: str) -> None:
    store = open_s3(
        moto_endpoint,
        bucket,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        bulk_workers=4,
        max_attempts=2,
    )
    store.put("k", b"v")
    blob = pickle.dumps(store)
    assert b"botocore" not in blob
    copy = pickle.loads(blob)
    assert isinstance(copy, S3Store)
    assert copy.client is not store.client
    assert copy.reopen_options() == store.reopen_options()
    assert (copy.bulk_workers, copy.max_attempts) == (4, 2)
    assert copy.get("k") == b"v"
    copy.close()
    store.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endpoint": "http://x"}, "unknown options"),
        ({"bulk_workers": 0}, "bulk_workers"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"retry_base_delay": -1}, "retry_base_delay"),
        ({"read_timeout": 0}, "read_timeout"),
        ({"endpoint_url": "127.0.0.1:9000"}, "endpoint_url"),
    ],
)
def test_bad_options_are_usage_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        open_store("s3://bucket/lake", **options)


@pytest.mark.parametrize("validation", ["when_supported", "when_required"])
def test_a_body_damaged_on_the_way_is_read_again(
    moto_endpoint: str, bucket: str, validation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a GET body with a flipped byte failed at once: botocore's checksum error was
    not retried, and without a checksum the block was reported corrupt at rest ("restore
    it from a replica") although the stored object was whole."""
    from merkle.blocks.store import BlockStore

    monkeypatch.setenv("AWS_RESPONSE_CHECKSUM_VALIDATION", validation)
    with open_s3(moto_endpoint, bucket, max_attempts=3, retry_base_delay=0) as store:
        blocks = BlockStore(store, cache_bytes=0)
        data = b"a block's bytes " * 64
        cid = blocks.put(data)
        with inject_s3_faults(store, "GetObject", kind="damaged", times=1) as faults:
            assert blocks.get(cid) == data
        assert faults.fired == 1
        with inject_s3_faults(store, "GetObject", kind="damaged", times=1):
            assert blocks.get_many([cid]) == {cid: data}
        with (
            inject_s3_faults(store, "GetObject", kind="damaged", times=100),
            pytest.raises((IntegrityError, StorageError)),
        ):
            blocks.get(cid)  # damaged on every read: an error, never the damaged bytes
