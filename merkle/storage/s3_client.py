"""How an S3 store's boto3 client is made, and its options checked before.

Botocore's own retries are switched off (one attempt per call: the retry
loop is :class:`merkle.storage.s3.S3Store`'s, see that module); clients come
from the process's one boto3 session, made under a lock.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, InvalidRegionError, PartialCredentialsError

from merkle.errors import UsageError

__all__ = ["check_bucket", "check_endpoint", "check_number", "check_text", "new_client"]

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
        raise UsageError(f"S3 option {name} must be text, got {type(value).__name__} {value!r}")


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
        return _session_client(
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
