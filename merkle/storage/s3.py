"""An object store in an S3 bucket (AWS S3, MinIO, moto, or any S3-compatible store).

``s3://bucket/prefix`` keeps every key under ``prefix/`` in ``bucket``. One
boto3 client serves the store and is shared by its I/O threads (clients are
thread-safe; sessions are not). Botocore's own retries are switched off: every
request goes through one retry loop here (exponential backoff with full
jitter on throttling, 5xx and connection errors) so that the store always
knows whether a failed write may still have happened, which
``put_if_absent`` needs to be exact and which ``StorageError.definite``
reports.

``put_if_absent`` is ``PutObject`` with ``If-None-Match: *``: S3 creates the
object only if the key is free and answers 412 otherwise, so exactly one of
any number of concurrent writers wins. If an attempt's outcome is unknown
(timeout, 5xx, connection dropped after sending) and a later attempt gets
412, the store reads the object back: the same bytes mean the earlier attempt
won (or someone stored identical content), different bytes mean another
writer did.
"""

from __future__ import annotations

import builtins
import functools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import SplitResult, unquote

from botocore.exceptions import BotoCoreError, ClientError

from merkle.errors import NotFoundError, StorageError, UsageError
from merkle.storage.base import (
    ObjectInfo,
    ObjectStore,
    check_data,
    check_key,
    check_prefix,
    check_range,
    quote_location,
)
from merkle.storage.s3_bodies import CONTENT_ADDRESSED, read_confirmed
from merkle.storage.s3_client import (
    OPTIONS,
    RESPONSE_ERRORS,
    MalformedResponseError,
    check_body,
    check_bucket,
    check_endpoint,
    check_head,
    check_no_userinfo,
    check_number,
    check_page,
    check_text,
    hidden_key,
    new_client,
    read_response,
)
from merkle.storage.s3_listing import follow_pages
from merkle.storage.s3_retry import (
    Failure,
    backoff_delay,
    classify,
    error_code,
    failure_message,
    http_status,
    is_not_found,
)

__all__ = ["S3Store"]

_T = TypeVar("_T")

#: S3's limit of keys in one DeleteObjects request.
DELETE_BATCH = 1000

#: Name prefix of the object check_conditional_writes creates and deletes (never a lake key).
_PROBE = ".merkle-probe-"


class S3Store(ObjectStore):
    """Objects in ``bucket`` under ``prefix``; see the module doc for the guarantees.

    ``max_attempts`` bounds the tries of every request (1 disables retries);
    the wait before retry *n* is uniform in ``[0, min(5 s, retry_base_delay *
    2**n)]``. ``bulk_workers`` threads run ``get_many``, ``put_many``,
    ``delete_many`` and ``map_bulk``. Credentials not given here come from
    boto3's usual chain (environment, profile, instance role).
    """

    schemes = ("s3",)
    list_page_size = 1000  # ListObjectsV2's page

    #: Longest wait between two attempts, in seconds.
    retry_max_delay: float = 5.0

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        bulk_workers: int = 16,
        max_attempts: int = 8,
        retry_base_delay: float = 0.05,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
    ) -> None:
        check_bucket(bucket)
        prefix = prefix.strip("/") if isinstance(prefix, str) else prefix
        if prefix:
            try:
                check_key(prefix)
            except UsageError as exc:
                raise UsageError(f"invalid prefix in s3://{bucket}/{prefix}: {exc}") from None
        check_endpoint(endpoint_url)
        check_text("region_name", region_name)
        check_text("aws_access_key_id", aws_access_key_id)
        check_text("aws_secret_access_key", aws_secret_access_key)
        check_text("aws_session_token", aws_session_token)
        check_number("bulk_workers", bulk_workers, minimum=1, integral=True)
        check_number("max_attempts", max_attempts, minimum=1, integral=True)
        check_number("retry_base_delay", retry_base_delay, minimum=0)
        check_number("connect_timeout", connect_timeout, minimum=0, exclusive=True)
        check_number("read_timeout", read_timeout, minimum=0, exclusive=True)

        self.bucket = bucket
        self.prefix = prefix + "/" if prefix else ""
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self.bulk_workers = bulk_workers
        self.max_attempts = max_attempts
        self.retry_base_delay = retry_base_delay
        self._credentials = {
            name: value
            for name, value in (
                ("aws_access_key_id", aws_access_key_id),
                ("aws_secret_access_key", aws_secret_access_key),
                ("aws_session_token", aws_session_token),
            )
            if value is not None
        }
        self._timeouts = {"connect_timeout": connect_timeout, "read_timeout": read_timeout}
        self._bucket_seen = False

        self._client: Any = new_client(
            endpoint_url=endpoint_url,
            region_name=region_name,
            credentials=self._credentials,
            connections=bulk_workers + 4,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )

    @classmethod
    def from_uri(cls, parts: SplitResult, options: Mapping[str, Any]) -> S3Store:
        check_no_userinfo(parts.netloc)  # first: the messages below repeat the URI
        uri = parts.geturl()
        if parts.query or parts.fragment:
            raise UsageError(
                f"malformed S3 URI {uri!r}: no query or fragment; pass options as keyword "
                "arguments (endpoint_url=..., region_name=...)"
            )
        if not parts.netloc:
            raise UsageError(f"malformed S3 URI {uri!r}: name a bucket, e.g. s3://my-bucket/lake")
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise UsageError(
                f"unknown options for s3://: {sorted(unknown)}; accepted: {', '.join(OPTIONS)}"
            )
        return cls(parts.netloc, unquote(parts.path), **options)

    @property
    def uri(self) -> str:
        return (
            f"s3://{self.bucket}/{quote_location(self.prefix.rstrip('/'))}"
            if self.prefix
            else f"s3://{self.bucket}"
        )

    @property
    def location(self) -> str:
        return self.uri if self.endpoint_url is None else f"{self.uri} at {self.endpoint_url}"

    @property
    def client(self) -> Any:
        """The boto3 S3 client of this store (tests hook its events to inject faults)."""
        return self._client

    @property
    def endpoint(self) -> str:
        """The endpoint URL requests go to."""
        return str(self._client.meta.endpoint_url)

    def reopen_options(self) -> dict[str, Any]:
        # Explicit credentials travel with a pickled store (Spark executors need
        # them); credentials from boto3's chain are looked up again on the other side.
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region_name,
            **self._credentials,
            "bulk_workers": self.bulk_workers,
            "max_attempts": self.max_attempts,
            "retry_base_delay": self.retry_base_delay,
            **self._timeouts,
        }

    def close(self) -> None:
        super().close()
        self._client.close()

    # -- request plumbing ------------------------------------------------------

    def _full(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _describe(self, what: str) -> str:
        return f"S3 {what} in {self.uri} at {self.endpoint}"

    def _no_bucket(self) -> StorageError:
        """The error for a bucket that does not exist (never created, or deleted in use).

        A :class:`StorageError`, not a :class:`NotFoundError`: callers read a
        missing *key* as an answer (a free journal slot, a block to write, a
        lake without a config), and a missing bucket answers nothing about
        keys. Taken for a missing key, it made a lake whose bucket was
        deleted read as a journal "altered from outside". Nothing was done,
        so it is ``definite``.
        """
        hint = f" --endpoint-url {self.endpoint_url}" if self.endpoint_url else ""
        return StorageError(
            f"S3 bucket {self.bucket!r} does not exist at {self.endpoint} (NoSuchBucket), so "
            f"the lake {self.uri} cannot be read or written and nothing was changed: create "
            f"the bucket (e.g. `aws s3 mb s3://{self.bucket}{hint}`; a lake that was in a "
            "deleted bucket must be restored from a backup) or fix the lake URI",
            definite=True,
        )

    def _missing(self, key: str) -> NotFoundError:
        """The error for a missing ``key``, or for the bucket if that is what is missing.

        A HEAD of a key in a missing bucket is a bare 404 like a missing key;
        the first such answer is checked once against the bucket itself. Later
        ones are taken for missing keys (a check per answer would add a request
        to every new block a commit stats); a bucket deleted since is named by
        the next GET, listing or PUT, which every operation makes.
        """
        if not self._bucket_seen:
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if http_status(exc) == 404 or error_code(exc) == "NoSuchBucket":
                    raise self._no_bucket() from None
            except (BotoCoreError, *RESPONSE_ERRORS):
                pass  # cannot tell; report the key
            else:
                self._bucket_seen = True
        return NotFoundError(f"no object {key!r} in {self.uri}")

    def _failed(
        self, what: str, exc: BaseException, failure: Failure, attempts: int, *, definite: bool
    ) -> StorageError:
        message = failure_message(self._describe(what), exc, failure, attempts, definite=definite)
        return StorageError(message, definite=definite)

    def _call(
        self,
        what: str,
        request: Callable[[], _T],
        *,
        key: str | None = None,
        writes: bool = False,
        proves_bucket: bool = True,
    ) -> _T:
        """Run ``request`` with retries; translate missing keys and buckets and failures.

        ``writes`` says the request changes the bucket, so an attempt whose
        outcome is unknown makes the final error indefinite. ``proves_bucket``
        says a success shows the bucket exists (not so for a probe that
        swallows 404s). A response cut off or garbled on the way is a
        :class:`MalformedResponseError`, retried like a dropped connection.
        """
        uncertain = False
        for attempt in range(self.max_attempts):
            try:
                result = read_response(request)
            except (ClientError, BotoCoreError) as exc:
                if isinstance(exc, ClientError):
                    if error_code(exc) == "NoSuchBucket":
                        raise self._no_bucket() from None
                    if key is not None and is_not_found(exc):
                        raise self._missing(key) from None
                failure = classify(exc)
                uncertain = uncertain or not failure.definite
                if not failure.retryable or attempt + 1 == self.max_attempts:
                    raise self._failed(
                        what, exc, failure, attempt + 1, definite=not (writes and uncertain)
                    ) from exc
                time.sleep(backoff_delay(attempt, self.retry_base_delay, self.retry_max_delay))
            else:
                if proves_bucket:
                    self._bucket_seen = True
                return result
        raise AssertionError("unreachable: max_attempts >= 1")

    # -- reads ---------------------------------------------------------------

    def get(self, key: str) -> bytes:
        return self._fetch(self._full(key), key)

    def _fetch(self, full: str, key: str) -> bytes:
        """A whole object's bytes; outside ``blocks/`` confirmed (see ``s3_bodies``)."""
        what = f"get of {key!r}"

        def fetch() -> tuple[bytes, Mapping[str, Any]]:
            response = self._client.get_object(Bucket=self.bucket, Key=full)
            return check_body(bytes(response["Body"].read()), response, what), response

        if key.startswith(CONTENT_ADDRESSED):
            return self._call(what, fetch, key=key)[0]  # checked against its CID by its reader
        return read_confirmed(
            lambda: self._call(what, fetch, key=key),
            validation=self._client.meta.config.response_checksum_validation,
            reads=self.max_attempts,
            pause=lambda n: time.sleep(
                backoff_delay(n, self.retry_base_delay, self.retry_max_delay)
            ),
            what=self._describe(what),
        )

    def get_range(self, key: str, start: int, length: int) -> bytes:
        full = self._full(key)
        start, length = check_range(key, start, length)
        if length == 0:
            self.stat(key)  # still NotFoundError for a missing key
            return b""

        def fetch() -> bytes:
            try:
                response = self._client.get_object(
                    Bucket=self.bucket, Key=full, Range=f"bytes={start}-{start + length - 1}"
                )
            except ClientError as exc:
                if error_code(exc) == "InvalidRange" or http_status(exc) == 416:
                    return b""  # the object exists but ends before ``start``
                raise
            data = check_body(bytes(response["Body"].read()), response, f"get of {key!r}")
            if "ContentRange" not in response:  # a store that ignored the Range header
                data = data[start : start + length]
            return data

        return self._call(f"ranged get of {key!r}", fetch, key=key)

    def stat(self, key: str) -> ObjectInfo:
        full = self._full(key)
        what = f"stat of {key!r}"
        response = self._call(
            what,
            lambda: check_head(self._client.head_object(Bucket=self.bucket, Key=full), what),
            key=key,
        )
        return ObjectInfo(key, int(response["ContentLength"]), response["LastModified"].timestamp())

    def exists(self, key: str) -> bool:
        full = self._full(key)

        def probe() -> bool:
            try:
                self._client.head_object(Bucket=self.bucket, Key=full)
            except ClientError as exc:
                if is_not_found(exc):
                    return False
                raise
            return True

        found = self._call(f"exists of {key!r}", probe, proves_bucket=False)
        if not found:
            self._missing(key)  # raises if it is the bucket that is missing
        return found

    def _pages(self, what: str, **request: Any) -> Iterator[dict[str, Any]]:
        """The pages of a ListObjectsV2 request, each fetched with retries; a page that is
        not a whole result is retried, never taken for an empty one (see check_page), and
        a listing that does not advance is an error (:mod:`merkle.storage.s3_listing`)."""

        def fetch(options: dict[str, Any]) -> dict[str, Any]:
            def call() -> dict[str, Any]:
                page = self._client.list_objects_v2(Bucket=self.bucket, **options)
                return dict(check_page(page, self.bucket, what))

            return self._call(what, call)

        return follow_pages(request, fetch, self._describe(what))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        strip = len(self.prefix)
        # S3 lists keys in ascending UTF-8 byte order, the order the contract asks for.
        for page in self._pages(f"list of {prefix!r}", Prefix=self.prefix + prefix):
            for item in page.get("Contents", ()):
                key = item["Key"][strip:]
                if hidden_key(key):
                    continue  # a probe object or a folder marker, never a lake key
                yield ObjectInfo(key, int(item["Size"]), item["LastModified"].timestamp())

    def list_prefixes(self, prefix: str = "") -> builtins.list[str]:
        check_prefix(prefix, directory=True)
        full = self.prefix + prefix
        names: set[str] = set()
        for page in self._pages(f"listing of {prefix!r}", Prefix=full, Delimiter="/"):
            names.update(
                entry["Prefix"][len(full) : -1] for entry in page.get("CommonPrefixes", ())
            )
            names.update(item["Key"][len(full) :] for item in page.get("Contents", ()))
        return sorted(name for name in names if name and not name.startswith("."))

    # -- writes --------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        full = self._full(key)
        body = check_data(key, data)
        self._call(
            f"put of {key!r}",
            lambda: self._client.put_object(Bucket=self.bucket, Key=full, Body=body),
            writes=True,
        )

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        # Check every key and value before the first write: bad input writes nothing.
        pairs = [(check_key(key), check_data(key, data)) for key, data in items]
        self.map_bulk(lambda pair: self.put(pair[0], pair[1]), pairs)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._create(self._full(key), key, check_data(key, data))

    def _create(self, full: str, key: str, body: bytes) -> bool:
        """PutObject with If-None-Match, retried, with a read-back when a 412 may be ours."""
        what = f"conditional put of {key!r}"
        uncertain = False  # an earlier attempt may have written the object
        for attempt in range(self.max_attempts):
            try:
                read_response(
                    lambda: self._client.put_object(
                        Bucket=self.bucket, Key=full, Body=body, IfNoneMatch="*"
                    )
                )
            except (ClientError, BotoCoreError) as exc:
                if isinstance(exc, ClientError):
                    if error_code(exc) == "PreconditionFailed" or http_status(exc) == 412:
                        return self._settle_precondition(full, key, body, uncertain=uncertain)
                    if error_code(exc) == "NoSuchBucket":
                        raise self._no_bucket() from None
                failure = classify(exc)
                uncertain = uncertain or not failure.definite
                if not failure.retryable or attempt + 1 == self.max_attempts:
                    raise self._failed(
                        what, exc, failure, attempt + 1, definite=not uncertain
                    ) from exc
                time.sleep(backoff_delay(attempt, self.retry_base_delay, self.retry_max_delay))
            else:
                self._bucket_seen = True
                return True
        raise AssertionError("unreachable: max_attempts >= 1")

    def _settle_precondition(self, full: str, key: str, body: bytes, *, uncertain: bool) -> bool:
        """Whether a 412 means this call won: only if an earlier attempt may have written.
        When the read-back cannot tell (the key was deleted since, or the read failed: its
        error, definite as to the read, says nothing of the write), it is indeterminate."""
        if not uncertain:
            return False
        try:
            stored = self._fetch(full, key)
        except (NotFoundError, StorageError) as exc:
            why = "it was deleted since" if isinstance(exc, NotFoundError) else f"failed ({exc})"
            raise StorageError(
                f"{self._describe(f'conditional put of {key!r}')} is indeterminate: an earlier "
                "attempt may have written it, a retry found the key taken, and reading it back "
                f"to learn whose it is {why}; read the key to find out",
                definite=False,
            ) from exc
        return stored == body

    def check_conditional_writes(self) -> None:
        """Raise :class:`StorageError` unless the bucket honours ``If-None-Match: *``.

        A store that ignores the header overwrites where it should refuse, and
        two writers would both "win" a commit. This creates a probe object
        twice (the second must be refused) and deletes it: three requests,
        for a setup check, not for every open. The probe's name starts with
        ``.``, so it can never collide with a lake key.
        """
        probe = f"{_PROBE}{uuid.uuid4().hex}"
        full = self.prefix + probe
        try:
            created = self._create(full, probe, b"first")
            refused = not self._create(full, probe, b"second")
        finally:
            self._call(
                f"delete of {probe!r}",
                lambda: self._client.delete_object(Bucket=self.bucket, Key=full),
                writes=True,
            )
        if not (created and refused):
            raise StorageError(
                f"{self._describe('conditional put')} is not honoured: the store ignored "
                "If-None-Match: * and overwrote an existing object. merkle needs conditional "
                "writes for its commits (AWS S3 since 2024, MinIO); use a store that has them",
                definite=True,
            )

    def remove_stale_temporaries(self, older_than: float) -> tuple[int, int]:
        """Delete the probe objects of interrupted :meth:`check_conditional_writes` calls.

        Puts are single ``PutObject`` requests (no multipart uploads), so a
        killed writer leaves nothing half-written in S3; the probe object is
        the only temporary this store creates.
        """
        stale = [
            (item["Key"], int(item["Size"]))
            for page in self._pages("listing of probe objects", Prefix=self.prefix + _PROBE)
            for item in page.get("Contents", ())
            if item["LastModified"].timestamp() < older_than
        ]
        if stale:
            self.map_bulk(self._delete_batch, [[full for full, _ in stale]])
        return len(stale), sum(size for _, size in stale)

    def touch(self, key: str) -> None:
        full = self._full(key)
        # A copy onto itself with new metadata is the only way S3 offers to
        # move LastModified without uploading the bytes again.
        what = f"touch of {key!r}"

        def copy() -> None:
            response = self._client.copy_object(
                Bucket=self.bucket,
                Key=full,
                CopySource={"Bucket": self.bucket, "Key": full},
                MetadataDirective="REPLACE",
            )
            # S3 answers 200 at once and reports the outcome in the body, after the copy.
            if "CopyObjectResult" not in response:
                raise MalformedResponseError(error=f"{what}: no CopyObjectResult")

        self._call(what, copy, key=key, writes=True)

    def delete(self, key: str) -> None:
        full = self._full(key)
        self._call(
            f"delete of {key!r}",
            lambda: self._client.delete_object(Bucket=self.bucket, Key=full),
            writes=True,
        )

    def delete_many(self, keys: Iterable[str]) -> None:
        fulls = builtins.list(dict.fromkeys(self._full(key) for key in keys))
        batches = [fulls[i : i + DELETE_BATCH] for i in range(0, len(fulls), DELETE_BATCH)]
        self.map_bulk(self._delete_batch, batches)

    def _delete_batch(self, fulls: builtins.list[str]) -> None:
        """One DeleteObjects request, retrying the keys S3 reports as transiently failed."""
        remaining = fulls
        for attempt in range(self.max_attempts):
            objects = [{"Key": full} for full in remaining]
            response = self._call(
                f"delete of {len(remaining)} keys",
                functools.partial(
                    self._client.delete_objects,
                    Bucket=self.bucket,
                    Delete={"Objects": objects, "Quiet": True},
                ),
                writes=True,
            )
            errors = response.get("Errors", [])
            if not errors:
                return
            failures = [
                classify(ClientError({"Error": {"Code": e.get("Code", "")}}, "DeleteObjects"))
                for e in errors
            ]
            if attempt + 1 == self.max_attempts or not all(f.retryable for f in failures):
                sample = ", ".join(
                    f"{e.get('Key', '?')[len(self.prefix) :]!r}: {e.get('Code')}"
                    for e in errors[:3]
                )
                raise StorageError(
                    f"{self._describe('delete')} failed for {len(errors)} of "
                    f"{len(remaining)} keys ({sample}); the others were deleted, retry the rest",
                    definite=False,
                )
            remaining = [e["Key"] for e in errors]
            time.sleep(backoff_delay(attempt, self.retry_base_delay, self.retry_max_delay))
