"""Following the pages of an S3 listing to its end, and refusing one that has none.

A ListObjectsV2 result is paged: each page names the token of the next. A
store (or a proxy in front of it) that ignores ``continuation-token`` answers
every request with the first page and its token again, and a listing that
followed it would never end (``list_dbs`` hung; a collection's listing of
blocks grew without bound). S3 lists keys in ascending order, so a page that
does not start above the last key listed, or a token sent before, is such a
store: a :class:`StorageError` says so. botocore's own paginator refuses a
repeated token the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from merkle.errors import StorageError

__all__ = ["follow_pages"]

Page = dict[str, Any]


def follow_pages(
    request: dict[str, Any], fetch: Callable[[dict[str, Any]], Page], described: str
) -> Iterator[Page]:
    """The pages of the listing ``request``, each got by ``fetch(options)``; ``described``
    names the listing in errors (the request, the store and its endpoint)."""
    token: str | None = None
    tokens: set[str] = set()
    last = ""  # the greatest key or prefix listed so far: each page must start above it
    while True:
        page = fetch(dict(request) if token is None else {**request, "ContinuationToken": token})
        names = [item["Key"] for item in page.get("Contents", ())]
        names += [entry["Prefix"] for entry in page.get("CommonPrefixes", ())]
        if names and min(names) <= last:
            raise _loops(described, f"a page starting at or below {last!r}")
        last = max(names, default=last)
        yield page
        if not page.get("IsTruncated"):
            return
        token = page["NextContinuationToken"]
        if token in tokens:
            raise _loops(described, "a continuation token it had sent before")
        tokens.add(token)


def _loops(described: str, problem: str) -> StorageError:
    """The error for a listing that does not advance (it would never end)."""
    return StorageError(
        f"{described} does not advance: the store answered with {problem}, so the listing "
        "would never end (a store or proxy that ignores the continuation-token parameter); "
        "nothing was changed: fix the store or proxy, or connect to the bucket directly",
        definite=True,
    )
