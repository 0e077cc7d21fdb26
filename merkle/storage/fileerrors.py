"""The file store's errors that say what happened and what to do.

Built only on the error path, so a successful read or write pays nothing for
them: a key that would be both an object and a directory, a lake directory
deleted while in use, a full disk.
"""

from __future__ import annotations

import errno

from merkle.errors import StorageError, UsageError
from merkle.storage.base import NO_SPACE

__all__ = ["lake_gone", "layout_error", "write_error"]


def layout_error(key: str, uri: str, *, is_object: bool) -> UsageError:
    """``key`` in the store at ``uri`` is an object (``is_object``) where a directory of
    keys is needed, or the other way round: a file store cannot hold both 'a' and 'a/b'."""
    if is_object:
        return UsageError(
            f"{key!r} in {uri} is an object, so no key can continue it "
            "with '/': a file store cannot hold both 'a' and 'a/b'"
        )
    return UsageError(
        f"{key!r} in {uri} is a directory of other keys, so it cannot "
        "be an object too: a file store cannot hold both 'a' and 'a/b'"
    )


def lake_gone(root: str) -> StorageError:
    """The error for a root directory that existed and no longer does."""
    return StorageError(
        f"the lake directory {root} is gone: it was deleted or moved while in use, "
        "and nothing was written (it is not made again: that would start a new, empty "
        "lake there). Open the lake where it is now, or restore it from a backup",
        definite=True,
    )


def write_error(key: str, uri: str, root: str, exc: BaseException, detail: str) -> StorageError:
    """The StorageError for a failed write of ``key``: a full disk says so, and what to do."""
    if isinstance(exc, OSError) and exc.errno in NO_SPACE:
        what = "full" if exc.errno == errno.ENOSPC else "over its quota"
        return StorageError(
            f"cannot write {key!r} to {uri}: the disk holding {root} is {what} "
            f"({exc.strerror or exc}){detail}; free some space there (or move the lake to "
            "a bigger disk) and try again. `merkle gc` can free space too, but needs some "
            "free space itself, so delete other files first"
        )
    return StorageError(f"cannot write {key!r} to {uri}: {exc}{detail}")
