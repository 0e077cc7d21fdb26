"""Fault injection and moto helpers for tests against an :class:`S3Store`.

``inject_s3_faults`` makes the next *N* calls of one S3 operation fail in a
chosen way, through botocore's ``before-send`` event on the store's client, so
the store's real retry and error logic runs. With ``after_send=True`` the
request is really sent to the server first (the write happens) and only then
does the client see the failure: the case in which a writer cannot know
whether it won, which ``CommitIndeterminateError`` and
``StorageError(definite=False)`` exist for::

    from s3faults import inject_s3_faults

    with inject_s3_faults(store, "PutObject", kind="timeout", times=1) as faults:
        assert store.put_if_absent("refs/db/00000000000000000001", entry)  # read back: ours
    assert faults.fired == 1 and faults.sent == 1

Kinds:

* ``"timeout"``: a read timeout (after sending) or a connect timeout (before).
* ``"connection"``: the connection drops (after sending) or is refused (before).
* ``"5xx"``: a 500 InternalError response.
* ``"slowdown"``: a 503 SlowDown (throttling) response.
* ``"412"``: a 412 PreconditionFailed response.
* ``"409"``: a 409 ConditionalRequestConflict (a racing conditional write).
* ``"403"``: a 403 AccessDenied (a failure that is not worth retrying).
* ``"501"``: a 501 NotImplemented (a store without conditional writes).

Only the given store's client is hooked: a copy made by pickling has a client
of its own and sees no faults.

``moto_atomic_conditional_puts`` makes moto's If-None-Match check and write
one step (moto checks, then writes, so two racing requests can both pass the
check, which real S3 never allows); ``set_moto_mtime`` backdates an object in
the in-process moto server, for tests of grace periods and ``touch``;
``seed_moto_objects`` fills a bucket with thousands of objects without HTTP.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from botocore.httpsession import URLLib3Session

from merkle.storage.s3 import S3Store

__all__ = [
    "FaultKind",
    "Faults",
    "inject_s3_faults",
    "moto_atomic_conditional_puts",
    "seed_moto_objects",
    "set_moto_mtime",
]

FaultKind = Literal[
    "timeout", "connection", "damaged", "5xx", "slowdown", "412", "409", "403", "501"
]

_ERROR_RESPONSES: dict[str, tuple[int, str, str]] = {
    "5xx": (500, "InternalError", "We encountered an internal error. Please try again."),
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "412": (412, "PreconditionFailed", "At least one of the preconditions did not hold."),
    "409": (409, "ConditionalRequestConflict", "A conflicting operation is in progress."),
    "403": (403, "AccessDenied", "Access Denied"),
    "501": (501, "NotImplemented", "A header you provided implies unimplemented functionality."),
}

_hook_ids = itertools.count()


class Faults:
    """What an :func:`inject_s3_faults` block did: faults fired, requests that reached S3."""

    def __init__(self, times: int) -> None:
        self.remaining = times
        self.fired = 0
        self.sent = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Claim one fault if any are left."""
        with self._lock:
            if self.remaining <= 0:
                return False
            self.remaining -= 1
            self.fired += 1
            return True


class _RawBody:
    """The smallest ``raw`` an :class:`AWSResponse` needs: a body to stream, once."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._at = 0

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        yield self.read()

    def read(self, amt: int | None = None, *_: Any, **__: Any) -> bytes:
        end = len(self._body) if amt is None else self._at + amt
        chunk = self._body[self._at : end]
        self._at += len(chunk)
        return chunk


def _error_response(url: str, kind: str) -> AWSResponse:
    status, code, message = _ERROR_RESPONSES[kind]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>injected</RequestId></Error>"
    ).encode()
    headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
    return AWSResponse(url, status, headers, _RawBody(body))


@contextmanager
def inject_s3_faults(
    store: S3Store,
    operation: str = "PutObject",
    kind: FaultKind = "timeout",
    times: int = 1,
    after_send: bool = True,
    key: str | None = None,
    damage: Callable[[bytes], bytes] | None = None,
    etag_follows: bool = False,
) -> Iterator[Faults]:
    """Make the next ``times`` calls of ``operation`` on ``store`` fail as ``kind``
    (``damaged``: the real response with one byte of its body flipped).

    With ``key``, only calls on that object key count (others go through).
    For ``damaged``, ``damage`` changes the body instead of the flip (its
    length must stay, as the Content-Length does), and ``etag_follows``
    makes the ETag the MD5 of the damaged body and drops the response's
    checksum headers: a wrong answer nothing in the response gives away.

    ``operation`` is the S3 API name (``"PutObject"``, ``"GetObject"``,
    ``"HeadObject"``, ``"CopyObject"``, ``"DeleteObjects"``, ...). With
    ``after_send`` the request reaches the server before the failure is
    reported; without it nothing is sent. Calls past ``times`` go through
    untouched. The hook is removed when the block exits.
    """
    if kind not in ("timeout", "connection", "damaged", *_ERROR_RESPONSES):
        raise ValueError(f"unknown fault kind {kind!r}")
    if times < 0:
        raise ValueError(f"times must be >= 0, got {times}")
    faults = Faults(times)
    sender = URLLib3Session()

    def before_send(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        if key is not None and not request.url.split("?")[0].endswith("/" + key):
            return None
        if not faults.take():
            return None
        if kind == "damaged":  # the real response, one byte of its body flipped on the way
            delivered = sender.send(request)
            body = bytearray(delivered.content)
            if damage is None:
                body[len(body) // 2] ^= 0x01
            else:
                body = bytearray(damage(bytes(body)))
            with faults._lock:
                faults.sent += 1
            headers = dict(delivered.headers.items())
            if etag_follows:
                headers = {
                    k: v
                    for k, v in headers.items()
                    if "checksum" not in k.lower() and k.lower() != "etag"
                }
                headers["ETag"] = f'"{hashlib.md5(bytes(body)).hexdigest()}"'
            return AWSResponse(request.url, delivered.status_code, headers, _RawBody(bytes(body)))
        if after_send:
            delivered = sender.send(request)
            _ = delivered.content  # read it all so the connection is released
            with faults._lock:
                faults.sent += 1
        if kind == "timeout":
            error = ReadTimeoutError if after_send else ConnectTimeoutError
            raise error(endpoint_url=request.url)
        if kind == "connection":
            if after_send:
                raise ConnectionClosedError(endpoint_url=request.url)
            raise EndpointConnectionError(endpoint_url=request.url)
        return _error_response(request.url, kind)

    event = f"before-send.s3.{operation}"
    unique_id = f"s3faults-{next(_hook_ids)}"
    events = store.client.meta.events
    events.register_first(event, before_send, unique_id=unique_id)
    try:
        yield faults
    finally:
        events.unregister(event, unique_id=unique_id)
        sender.close()


@contextmanager
def moto_atomic_conditional_puts() -> Iterator[None]:
    """Serialise moto's PutObject handling so its If-None-Match check and write are atomic.

    Real S3 decides conditional writes atomically; moto checks for the key,
    then writes it, and two racing requests can both pass the check. Tests
    that race ``put_if_absent`` on the in-process moto server use this so
    that they test merkle's client logic, not moto's race.
    """
    from moto.s3.responses import S3Response

    original: Callable[..., Any] = S3Response.put_object
    lock = threading.RLock()

    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    S3Response.put_object = put_object  # type: ignore[method-assign]
    try:
        yield
    finally:
        S3Response.put_object = original  # type: ignore[method-assign]


def _moto_backend(store: S3Store) -> Any:
    from moto.s3.models import s3_backends

    partition, account = s3_backends.bucket_accounts[store.bucket]
    return s3_backends[account][partition]


def set_moto_mtime(store: S3Store, key: str, mtime: float) -> None:
    """Set the LastModified of ``key`` in the in-process moto server (seconds since the epoch)."""
    stored = _moto_backend(store).buckets[store.bucket].keys[store.prefix + key]
    stored.last_modified = datetime.fromtimestamp(mtime, UTC).replace(tzinfo=None)


def seed_moto_objects(store: S3Store, items: Iterable[tuple[str, bytes]]) -> None:
    """Store objects straight into the in-process moto server, without HTTP.

    Thousands of objects arrive in milliseconds instead of seconds: for
    tests of listing, paging and bulk deletes, not of puts.
    """
    backend = _moto_backend(store)
    for key, data in items:
        backend.put_object(store.bucket, store.prefix + key, data)
