"""What the S3 store says when a response is cut or a request is not implemented.

- botocore turns a 200 whose body does not parse into a 500 (so that it is
  retried) in a hook that runs before the store's framing check: a listing
  cut on the way on every attempt ended as "500 (HTTP 500): Internal Server
  Error", never the store's "cut off or malformed" message that says where to
  look (a proxy, a load balancer, the network).
- A 501 NotImplemented to a plain PutObject (no condition sent; a store that
  refuses the checksum headers boto3 adds by default) was blamed on
  conditional writes, the wrong feature, with no hint of the setting that
  helps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.httpsession import URLLib3Session
from conftest import new_bucket

from merkle.errors import StorageError
from merkle.storage import open_store
from merkle.storage.s3 import S3Store

pytestmark = pytest.mark.s3


class _Raw:
    """A response body botocore reads at once."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        yield self.read()

    def read(self, *_: Any, **__: Any) -> bytes:
        body, self.body = self.body, b""
        return body


@pytest.fixture
def store(moto_endpoint: str) -> Iterator[S3Store]:
    opened = open_store(
        f"s3://{new_bucket(moto_endpoint)}/lake",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        max_attempts=2,
        retry_base_delay=0.01,
    )
    assert isinstance(opened, S3Store)
    yield opened
    opened.close()


def test_a_listing_cut_on_every_attempt_is_named_as_cut_not_as_a_server_error(
    store: S3Store,
) -> None:
    store.put("refs/shop/00000000000000000000", b"x")
    sender = URLLib3Session()

    def cut(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        real = sender.send(request)  # the real 200 answer, cut after 120 of its bytes
        headers = dict(real.headers.items())
        return AWSResponse(request.url, real.status_code, headers, _Raw(real.content[:120]))

    store.client.meta.events.register_first("before-send.s3.ListObjectsV2", cut)
    with pytest.raises(StorageError) as raised:
        list(store.list("refs/"))
    message = str(raised.value)
    assert "cut off or malformed" in message
    assert "answered 120 of" in message
    assert "Internal Server Error" not in message


def test_a_real_server_error_is_still_a_server_error(store: S3Store) -> None:
    body = b"<Error><Code>InternalError</Code><Message>We encountered an error</Message></Error>"

    def fail(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 500, {"Content-Length": str(len(body))}, _Raw(body))

    store.client.meta.events.register_first("before-send.s3.ListObjectsV2", fail)
    with pytest.raises(StorageError, match=r"InternalError \(HTTP 500\)") as raised:
        list(store.list("refs/"))
    assert "cut off" not in str(raised.value)


def _not_implemented(sent: dict[str, Any]) -> Any:
    body = (
        b"<Error><Code>NotImplemented</Code><Message>Header 'x-amz-checksum-crc32' with "
        b"value is not implemented</Message></Error>"
    )

    def refuse(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        sent.update({key.lower(): value for key, value in request.headers.items()})
        return AWSResponse(request.url, 501, {"Content-Length": str(len(body))}, _Raw(body))

    return refuse


def test_a_plain_put_refused_as_not_implemented_names_the_checksum_setting(
    store: S3Store,
) -> None:
    sent: dict[str, Any] = {}
    store.client.meta.events.register_first("before-send.s3.PutObject", _not_implemented(sent))
    with pytest.raises(StorageError) as raised:
        store.put("blocks/x", b"data")
    assert "if-none-match" not in sent
    message = str(raised.value)
    assert "If-None-Match" not in message
    assert "AWS_REQUEST_CHECKSUM_CALCULATION=when_required" in message


def test_a_conditional_put_refused_as_not_implemented_names_conditional_writes(
    store: S3Store,
) -> None:
    sent: dict[str, Any] = {}
    store.client.meta.events.register_first("before-send.s3.PutObject", _not_implemented(sent))
    with pytest.raises(StorageError, match="conditional writes with If-None-Match"):
        store.put_if_absent("refs/shop/00000000000000000001", b"entry")
    assert sent.get("if-none-match") == b"*"
