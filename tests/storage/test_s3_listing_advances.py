"""A listing that does not advance is an error, never an endless loop.

A store (or a proxy in front of it) that ignores ``continuation-token`` answers
every page request with the first page again, with the same next token. The
store followed it for ever: ``list_dbs()`` hung, and GC's listing of blocks grew
without bound. botocore's own paginator refuses a repeated token; so does the
store now, and a page that does not start above the last key listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import new_bucket

import merkle
from merkle.errors import StorageError
from merkle.storage import open_store
from merkle.storage.s3 import S3Store

pytestmark = pytest.mark.s3


@pytest.fixture
def store(moto_endpoint: str) -> Iterator[S3Store]:
    opened = open_store(
        f"s3://{new_bucket(moto_endpoint)}/lake",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
    )
    assert isinstance(opened, S3Store)
    for i in range(5):
        opened.put(f"refs/db{i}/00000000000000000001", b"x")
    yield opened
    opened.close()


def _pages_of_two(store: S3Store, *, drop_token: bool) -> list[int]:
    """List in pages of two; with ``drop_token`` the request forgets where it was."""
    calls = [0]

    def paged(params: dict[str, Any], **_: Any) -> None:
        calls[0] += 1
        params["MaxKeys"] = 2
        if drop_token:
            params.pop("ContinuationToken", None)
        if calls[0] > 50:  # the old code never stopped: end the test, not the run
            raise RuntimeError("the listing loops")

    store.client.meta.events.register("provide-client-params.s3.ListObjectsV2", paged)
    return calls


def test_a_store_that_repeats_the_first_page_is_an_error_not_a_hang(store: S3Store) -> None:
    calls = _pages_of_two(store, drop_token=True)
    with pytest.raises(StorageError, match="does not advance") as raised:
        list(store.list("refs/"))
    assert "continuation-token" in str(raised.value)
    with pytest.raises(StorageError, match="does not advance"):
        store.list_prefixes("refs/")
    assert calls[0] <= 4


def test_a_store_that_repeats_a_token_is_an_error(
    store: S3Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = store.client
    real = client.list_objects_v2
    latest: dict[str, str] = {}  # the real token behind the one the store is given

    def same_token(**request: Any) -> dict[str, Any]:
        if "ContinuationToken" in request:
            request["ContinuationToken"] = latest["token"]
        page = dict(real(**{**request, "MaxKeys": 2}))
        if page.get("IsTruncated"):  # pages advance, but every one names the same token
            latest["token"] = page["NextContinuationToken"]
            page["NextContinuationToken"] = "always-the-same"
        return page

    monkeypatch.setattr(client, "list_objects_v2", same_token)
    with pytest.raises(StorageError, match="a continuation token it had sent before"):
        list(store.list("refs/"))


def test_paged_listings_that_advance_list_everything(store: S3Store) -> None:
    _pages_of_two(store, drop_token=False)
    assert [info.key for info in store.list("refs/")] == [
        f"refs/db{i}/00000000000000000001" for i in range(5)
    ]
    assert store.list_prefixes("refs/") == [f"db{i}" for i in range(5)]


def test_list_dbs_on_a_looping_store_says_so(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    options = {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}
    with merkle.connect(f"s3://{bucket}/p", **options) as conn:
        for i in range(3):
            conn.create_db(f"db{i}")
        assert isinstance(conn.store, S3Store)
        _pages_of_two(conn.store, drop_token=True)
        with pytest.raises(StorageError, match="does not advance"):
            conn.list_dbs()
