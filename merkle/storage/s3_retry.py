"""How S3 failures are judged: worth retrying or not, and whether they could have taken effect.

An S3 request can fail before any byte of it was sent (the connection was
refused or timed out, the name did not resolve, the server's certificate was
refused) or be refused by the server (throttled), in which case it surely did
nothing, or fail after it may have been sent (a read timeout, a dropped
connection, a TLS error on the open connection, a 5xx), in which case the
write may have happened. :class:`S3Store` retries both kinds with exponential backoff and
full jitter, and uses the second kind to decide when the outcome of a write
is unknown (``StorageError(definite=False)``) and when a conditional put must
read the object back to learn whether it won.
"""

from __future__ import annotations

import random
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

from botocore.exceptions import (
    BotoCoreError,
    ChecksumError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from urllib3.exceptions import ConnectTimeoutError as Urllib3ConnectTimeoutError

__all__ = [
    "Failure",
    "backoff_delay",
    "classify",
    "error_code",
    "failure_message",
    "http_status",
    "is_not_found",
]

#: Codes S3 (and S3-compatible stores) send when they refuse a request for load.
THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "BandwidthLimitExceeded",
    }
)

#: The server gave up waiting for the request body: nothing was written.
_CLIENT_TIMEOUT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException"})

#: A concurrent conflicting request (e.g. two conditional writes): try again.
_CONFLICT_CODES = frozenset({"ConditionalRequestConflict", "OperationAborted"})

#: Server-side failures in which the request may or may not have taken effect.
_SERVER_CODES = frozenset({"InternalError", "ServiceUnavailable", "PriorRequestNotComplete"})


@dataclass(frozen=True, slots=True)
class Failure:
    """The verdict on one failed attempt."""

    retryable: bool
    definite: bool  # True: the request surely did not take effect
    code: str  # the S3 error code, or the exception's class name


def error_code(exc: ClientError) -> str:
    """The S3 error code of a client error (``"NoSuchKey"``, ``"404"``, ...)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: ClientError) -> int:
    """The HTTP status of a client error, 0 if unknown."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_not_found(exc: ClientError) -> bool:
    """Whether ``exc`` says the object is missing (GET's NoSuchKey or HEAD's bare 404)."""
    return error_code(exc) in ("NoSuchKey", "NotFound", "404") or (
        http_status(exc) == 404 and error_code(exc) != "NoSuchBucket"
    )


def classify(exc: BaseException) -> Failure:
    """Judge a botocore exception: retry it or not, and could it have taken effect."""
    if isinstance(exc, ClientError):
        code, status = error_code(exc), http_status(exc)
        if code in THROTTLING_CODES or status == 429:
            return Failure(retryable=True, definite=True, code=code)
        if code in _CLIENT_TIMEOUT_CODES or code in _CONFLICT_CODES:
            return Failure(retryable=True, definite=True, code=code)
        if code == "NotImplemented" or status == 501:
            # The store does not support a header we sent: it did nothing, and never will.
            return Failure(retryable=False, definite=True, code="NotImplemented")
        if status >= 500 or code in _SERVER_CODES:
            return Failure(retryable=True, definite=False, code=code or str(status))
        return Failure(retryable=False, definite=True, code=code or str(status))
    name = type(exc).__name__
    if isinstance(exc, BotoConnectionError):
        # Connect refused or timed out, DNS, a refused certificate: nothing was sent.
        # Any other TLS or proxy error may come after the request went out.
        return Failure(retryable=True, definite=_before_sending(exc), code=name)
    if isinstance(exc, (HTTPClientError, IncompleteReadError)):
        # Read timeout, connection closed, truncated body: the request was sent.
        return Failure(retryable=True, definite=False, code=name)
    if isinstance(exc, (FlexibleChecksumError, ChecksumError)):
        # A response body whose checksum does not match: damaged on the way, not at rest.
        return Failure(retryable=True, definite=False, code=name)
    if isinstance(exc, BotoCoreError):
        # Missing credentials, invalid parameters: refused before sending.
        return Failure(retryable=False, definite=True, code=name)
    return Failure(retryable=False, definite=False, code=name)


#: Causes that mean the connection never opened (urllib3's NewConnectionError, its name
#: resolution error included, is a ConnectTimeoutError) or the handshake refused the server.
_NOT_SENT = (
    Urllib3ConnectTimeoutError,
    socket.gaierror,
    ConnectionRefusedError,
    ssl.SSLCertVerificationError,
)


def _before_sending(exc: BotoConnectionError) -> bool:
    """Whether a botocore connection error surely came before any byte of the request
    went out: opening the connection failed (refused, timed out, name not resolved) or
    the TLS handshake refused the server's certificate.

    Not every ``ConnectionError`` is one: botocore's ``SSLError`` is raised for a TLS
    failure at any point (a damaged record of the *response* raises "bad record mac"
    after the request was stored), and with urllib3 1.x a ``ProxyConnectionError`` for
    any socket error on a proxied connection. Those count as definite only when their
    cause shows the connection never opened; anything unknown counts as sent.
    """
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        return True  # botocore raises these only while connecting (httpsession.send)
    return any(isinstance(cause, _NOT_SENT) for cause in _causes(exc))


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions ``exc`` wraps: botocore's ``error=``, urllib3's ``original_error``
    and wrapped arguments, and Python's ``__cause__``/``__context__``, depth first."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current is not exc:
            yield current
        kwargs = getattr(current, "kwargs", None)
        inner = [
            kwargs.get("error") if isinstance(kwargs, dict) else None,
            getattr(current, "original_error", None),
            *current.args,
            current.__cause__,
            current.__context__,
        ]
        stack.extend(item for item in inner if isinstance(item, BaseException))


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): full jitter, capped."""
    return random.uniform(0.0, min(cap, base * (2.0**attempt)))


#: Codes that mean the credentials or the bucket policy refused the request ("403" is
#: a HEAD's: its answer has no body, so no code, only the status).
_CREDENTIAL_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "403"}
)


def failure_message(
    what: str, exc: BaseException, failure: Failure, attempts: int, *, definite: bool
) -> str:
    """The one line a failed request reports: what failed, why, and what to do about it."""
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    message = f"{what} failed{tries}: {_reason(exc)}"
    if failure.code in _CREDENTIAL_CODES:
        message += "; check the credentials (boto3 chain or aws_* options) and bucket policy"
    elif failure.code == "NotImplemented" and "conditional put" in what:
        message += (
            "; this S3-compatible store lacks a feature merkle needs (conditional writes "
            "with If-None-Match: AWS S3 since 2024, MinIO)"
        )
    elif failure.code == "NotImplemented":
        # No condition was sent: most often the checksum headers boto3 adds since 1.36.
        message += (
            "; this S3-compatible store does not implement part of the request: if it "
            "refuses the checksums boto3 sends by default, set "
            "AWS_REQUEST_CHECKSUM_CALCULATION=when_required (and "
            "AWS_RESPONSE_CHECKSUM_VALIDATION=when_required)"
        )
    elif type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
        message += (
            "; set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, an AWS profile, "
            "or pass aws_access_key_id= and aws_secret_access_key="
        )
    if not definite:
        message += "; it may or may not have taken effect: read it back to find out"
    return message


def _reason(exc: BaseException) -> str:
    """A failure in a few words: the S3 code, status and message, or botocore's text."""
    if isinstance(exc, ClientError):
        detail = exc.response.get("Error", {}).get("Message", "")
        reason = f"{error_code(exc) or 'error'} (HTTP {http_status(exc)})"
        return f"{reason}: {detail}" if detail else reason
    return str(exc) or type(exc).__name__
