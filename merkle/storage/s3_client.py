"""How an S3 store's boto3 client is made, its options checked before and its answers after.

Botocore's own retries are switched off (one attempt per call: the retry
loop is :class:`merkle.storage.s3.S3Store`'s, see that module); clients come
from the process's one boto3 session, made under a lock.

A response cut off by a proxy, load balancer or the network is not always an
error to botocore: cut inside its headers, it reads as a 200 with an empty
body (an empty listing, an empty object), and cut inside a header botocore
parses, it raises a bare ``ValueError``. Every client made here checks that a
2xx response is whole (:func:`check_framing`), and the store checks the fields
each answer must have (:func:`check_page`, ...); what fails is a
:class:`MalformedResponseError`, which the store retries like a dropped
connection. An empty listing taken for real once made GC free a live
database's blocks.
"""

from __future__ import annotations

import http.client
import math
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import boto3
import urllib3.exceptions
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    InvalidRegionError,
    PartialCredentialsError,
)
from botocore.parsers import ResponseParserError

from merkle.errors import UsageError

__all__ = [
    "OPTIONS",
    "RESPONSE_ERRORS",
    "MalformedResponseError",
    "check_body",
    "check_bucket",
    "check_endpoint",
    "check_framing",
    "check_head",
    "check_no_userinfo",
    "check_number",
    "check_page",
    "check_text",
    "hidden_key",
    "new_client",
    "read_response",
]
_T = TypeVar("_T")

#: The options an ``s3://`` URI takes (keyword arguments of ``S3Store``).
OPTIONS = (
    "endpoint_url",
    "region_name",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "bulk_workers",
    "max_attempts",
    "retry_base_delay",
    "connect_timeout",
    "read_timeout",
)


# 3-63 characters of lowercase letters, digits, dots and hyphens, starting and
# ending with a letter or digit, no "..", not an IPv4 address.
_BUCKET_RE = re.compile(
    r"(?!xn--)(?!.*\.\.)(?!\d+\.\d+\.\d+\.\d+$)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
)


def check_bucket(bucket: object) -> None:
    """UsageError unless ``bucket`` is a valid S3 bucket name."""
    if not isinstance(bucket, str) or not _BUCKET_RE.fullmatch(bucket):
        raise UsageError(
            f"invalid S3 bucket name {bucket!r}: use 3-63 lowercase letters, digits, "
            "dots and hyphens, starting and ending with a letter or digit"
        )


def hidden_key(key: str) -> bool:
    """Whether a listed key is none a lake holds: a segment starting with '.' (a probe
    object), or an empty segment: a "folder" marker (a key ending in '/', which the AWS
    console's "Create folder", s3fs and Hadoop's S3A write) or a doubled '/'."""
    return key.startswith(".") or "/." in key or not key or key.endswith("/") or "//" in key


def check_no_userinfo(netloc: str) -> None:
    """UsageError for credentials in an S3 URI's authority (``s3://KEY:SECRET@bucket``).

    Other tools accept that form; here the part before ``@`` was taken for
    part of the bucket name, and the error echoed the secret into logs. The
    message repeats only the bucket after the ``@``, never what is before it.
    """
    if "@" not in netloc:
        return
    bucket = netloc.rpartition("@")[2]
    raise UsageError(
        f"S3 URI s3://{bucket}/... has credentials before the bucket name: credentials "
        "do not go in the URI (it is logged and shown); remove them and pass the options "
        "aws_access_key_id and aws_secret_access_key (and aws_session_token; in the CLI "
        "-o aws_access_key_id=...), or leave them to boto3's chain (AWS_ACCESS_KEY_ID / "
        "AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws/credentials, an instance role); "
        "see doc/storage.md"
    )


def check_endpoint(endpoint_url: object) -> None:
    """UsageError unless ``endpoint_url`` is None or an http(s) URL."""
    if endpoint_url is not None and (
        not isinstance(endpoint_url, str) or not endpoint_url.startswith(("http://", "https://"))
    ):
        raise UsageError(f"endpoint_url must be an http:// or https:// URL, got {endpoint_url!r}")


def check_number(
    name: str, value: object, *, minimum: float, integral: bool = False, exclusive: bool = False
) -> None:
    """UsageError unless option ``name`` is a number (an integer if ``integral``) at least
    (above, if ``exclusive``) ``minimum``."""
    kinds: tuple[type, ...] = (int,) if integral else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    if ok:
        assert isinstance(value, (int, float))
        # inf passed: then every request failed after its retries ("timestamp out of range")
        ok = math.isfinite(value) and (value > minimum if exclusive else value >= minimum)
    if not ok:
        bound = f"> {minimum}" if exclusive else f">= {minimum}"
        kind = "an integer" if integral else "a finite number"
        raise UsageError(f"S3 option {name} must be {kind} {bound}, got {value!r}")


def check_text(name: str, value: object) -> None:
    """UsageError unless option ``name`` is text or not given: botocore raised a bare
    TypeError for a region or a key that is a number (``-o region_name=123`` in the CLI
    makes an int)."""
    if value is not None and not isinstance(value, str):
        shown = "" if name.startswith("aws_") else f" {value!r}"  # never repeat a credential
        raise UsageError(f"S3 option {name} must be text, got {type(value).__name__}{shown}")


def new_client(
    *,
    endpoint_url: str | None,
    region_name: str | None,
    credentials: Mapping[str, str],
    connections: int,
    connect_timeout: float,
    read_timeout: float,
) -> Any:
    """An S3 client that tries each call once, with ``connections`` pooled connections."""
    config = Config(
        # Retries are the store's (see the module doc): one attempt per botocore call.
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=connections,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        # Custom endpoints (MinIO, moto) rarely resolve bucket subdomains.
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    try:
        client = _session_client(
            endpoint_url=endpoint_url, region_name=region_name, config=config, **credentials
        )
    except PartialCredentialsError:
        given = ", ".join(sorted(credentials)) or "none"
        raise UsageError(
            "S3 options aws_access_key_id and aws_secret_access_key go together: pass both "
            f"(given: {given}), or neither to use the environment's credentials (AWS_* "
            "variables, ~/.aws, an instance role)"
        ) from None
    except InvalidRegionError:
        raise UsageError(
            f"S3 option region_name {region_name!r} is not a valid region name: use one such "
            "as 'us-east-1' (letters, digits and hyphens), or leave it out"
        ) from None
    except (BotoCoreError, ValueError) as exc:
        # Whatever else boto3 refuses while making a client is one of the options above.
        raise UsageError(
            f"boto3 refused the S3 options (endpoint_url={endpoint_url!r}, "
            f"region_name={region_name!r}, credentials given: "
            f"{', '.join(sorted(credentials)) or 'none'}): {exc}; correct the option it names"
        ) from None
    client.meta.events.register("before-parse.s3.*", check_framing, unique_id="merkle-framing")
    return client


class MalformedResponseError(HTTPClientError):  # type: ignore[misc]  # botocore is untyped
    """A response that is not a whole answer: cut off on the way, or garbled.

    An :class:`HTTPClientError` because it is one: the request was sent and
    its answer was lost, so it is retried, and a write may have taken effect
    (as with a dropped connection; see ``merkle.storage.s3_retry.classify``).
    """

    fmt = (
        "the response was cut off or malformed ({error}); a proxy, load balancer or the "
        "network between here and the endpoint dropped part of it"
    )


#: What botocore (or urllib3 under it) raises for a response it cannot parse: a header
#: cut mid-value (``Invalid timestamp "F"``), a body cut mid-chunk, XML that is not XML.
RESPONSE_ERRORS: tuple[type[Exception], ...] = (
    ResponseParserError,
    ValueError,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
)


def read_response(request: Callable[[], _T]) -> _T:
    """``request()``, with what botocore raised reading a response it could not parse
    (one of :data:`RESPONSE_ERRORS`) raised as a :class:`MalformedResponseError`."""
    try:
        return request()
    except RESPONSE_ERRORS as exc:
        if isinstance(exc, (ClientError, BotoCoreError)):
            raise  # botocore's own (some are ValueErrors too), judged as they are
        raise MalformedResponseError(error=f"{type(exc).__name__}: {exc}") from exc


def check_framing(operation_model: Any, response_dict: dict[str, Any], **_: Any) -> None:
    """Refuse a 2xx response whose end cannot be told from a cut (botocore's
    ``before-parse`` hook).

    A response cut inside its headers lost its ``Content-Length``: botocore
    then reads an empty body and parses it as an empty answer. A response
    cut after them has a shorter body than it announced. A body must be
    framed (``Content-Length`` or chunked) and, when botocore has read it
    whole, as long as announced. HEAD and 204 answers have no body; a
    streamed body (GetObject) is measured as it is read (botocore's
    ``StreamingBody`` and :func:`check_body`).
    """
    status = int(response_dict.get("status_code", 0))
    if status == 204 or operation_model.http.get("method") == "HEAD":
        return
    headers = response_dict.get("headers") or {}
    length = headers.get("content-length")
    body = response_dict.get("body")
    encoded = str(headers.get("content-encoding", "identity")).lower() not in ("", "identity")
    if not 200 <= status < 300:
        # botocore turns a 200 whose body does not parse into a 500 to retry it (its own
        # before-parse hook runs first): a body shorter than announced was cut on the way,
        # whatever the status now says, and is named so, not as a server error.
        if isinstance(body, bytes) and not encoded and len(body) < _int(length):
            raise MalformedResponseError(
                error=f"{operation_model.name} answered {len(body)} of {length} bytes"
            )
        return
    if length is None:
        if "chunked" not in str(headers.get("transfer-encoding", "")).lower():
            raise MalformedResponseError(
                error=f"HTTP {status} to {operation_model.name} without a Content-Length"
            )
        return
    if isinstance(body, bytes) and not encoded and str(len(body)) != str(length).strip():
        raise MalformedResponseError(
            error=f"{operation_model.name} answered {len(body)} of {length} bytes"
        )


def _int(text: object) -> int:
    """A Content-Length header as a number (-1 if it is none: never shorter than a body)."""
    try:
        return int(str(text).strip())
    except ValueError:
        return -1


def check_body(data: bytes, response: Mapping[str, Any], what: str) -> bytes:
    """``data``, the body of a GetObject ``response``, if it is as long as announced."""
    length = response.get("ContentLength")
    if length is not None and len(data) != length:
        raise MalformedResponseError(error=f"{what}: {len(data)} of {length} bytes arrived")
    return data


def check_head(response: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    """``response`` to a HeadObject if it has the object's size and modification time."""
    missing = [name for name in ("ContentLength", "LastModified") if name not in response]
    if missing:
        raise MalformedResponseError(error=f"{what}: no {' or '.join(missing)} header")
    return response


def check_page(page: Mapping[str, Any], bucket: str, what: str) -> Mapping[str, Any]:
    """``page`` if it is a whole ListObjectsV2 result of ``bucket``.

    Every result names its bucket and says whether it is truncated (and
    then how to go on); every entry has a key, size and time, or a prefix.
    An empty dict (the parse of an empty body) is none of that, and must
    never read as "no keys".
    """
    contents = page.get("Contents", [])
    prefixes = page.get("CommonPrefixes", [])
    problem = ""
    if "IsTruncated" not in page or page.get("Name") != bucket:
        problem = "it is not a ListObjectsV2 result (no IsTruncated, or not of this bucket)"
    elif page["IsTruncated"] and not page.get("NextContinuationToken"):
        problem = "it is truncated but has no NextContinuationToken"
    elif any(not {"Key", "Size", "LastModified"} <= set(item) for item in contents) or any(
        "Prefix" not in entry for entry in prefixes
    ):
        problem = "an entry lacks its Key, Size, LastModified or Prefix"
    if problem:
        raise MalformedResponseError(error=f"{what}: {problem}")
    return page


_SESSION: boto3.session.Session | None = None
_SESSION_LOCK = threading.Lock()


def _session_client(**options: Any) -> Any:
    """An S3 client from the process's one boto3 session.

    Sessions are not thread-safe but cache the loaded service models, which
    makes a client several times cheaper to create than from a fresh session
    (stores are opened per Spark task); so clients are made under a lock.
    """
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            _SESSION = boto3.session.Session()
        return _SESSION.client("s3", **options)


def _forget_session() -> None:
    # A forked child must not inherit a lock held by another thread of its parent.
    global _SESSION, _SESSION_LOCK
    _SESSION, _SESSION_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_session)
