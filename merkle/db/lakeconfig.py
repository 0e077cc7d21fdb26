"""The lake's settings object (``config``): written once, when the lake is first used.

It names the hash every block of the lake is addressed by, chosen when the
lake is made and never changed (a block's CID is its address, so a second
hash would make a second copy of every block).
"""

from __future__ import annotations

import contextlib
from typing import Any

from merkle.blocks.codec import NODE_VERSION, check_node, decode_object, encode_node
from merkle.errors import IntegrityError, NotFoundError, StorageError, UsageError
from merkle.refs.entry import CONFIG_KEY
from merkle.storage.base import ObjectStore

__all__ = ["CONFIG_KEY", "CONFIG_TYPE", "LAKE_HASHES", "lake_config", "lake_sizes"]

#: The lake's settings object, written once when the lake is first used.
CONFIG_TYPE = "merkle/lake"
#: The hashes a lake's blocks may be addressed by (chosen when the lake is made).
LAKE_HASHES = ("blake3", "sha2-256")


def lake_sizes(cache_bytes: Any, workers: Any) -> tuple[int, int]:
    """``connect``'s ``cache_bytes`` (at least 0) and ``workers`` (at least 1), checked
    before anything is opened: each is a whole number, given as one or, from a
    command-line (``-o workers=4``) or URI option, as its text. A bad one would
    otherwise fail later, raw, in the first read that sizes a cache or fans out."""
    from merkle.db.inputs import check_count

    cache = check_count(
        cache_bytes, "cache_bytes (connect(cache_bytes=), -o cache_bytes=N)", 0, text=True
    )
    return cache, check_count(workers, "workers (connect(workers=), -o workers=N)", 1, text=True)


def lake_config(store: ObjectStore, hash: str | None, create: bool) -> dict[str, Any]:
    """Read the lake's settings, creating them (with ``hash``) on a new lake if ``create``."""
    if hash is not None and (not isinstance(hash, str) or hash not in LAKE_HASHES):
        raise UsageError(
            f"hash={hash!r} is not a hash merkle-db stores blocks with: use one of "
            f"{', '.join(LAKE_HASHES)} (or leave it out: an existing lake keeps its own)"
        )
    try:
        node = _decode(store.get(CONFIG_KEY), store.uri)
    except NotFoundError:
        if not create:
            # A location missing itself (an S3 bucket) says so in its own words (a
            # NotFoundError from the listing); an empty or foreign one is no lake.
            with contextlib.suppress(StorageError):
                next(iter(store.list()), None)
            raise NotFoundError(
                f"there is no merkle lake at {store.uri}: check the location, or create "
                "the lake (pass create=True to merkle.connect; CLI: --create, "
                "or `merkle db create`)"
            ) from None
        node = {"type": CONFIG_TYPE, "v": NODE_VERSION, "hash": hash or "blake3"}
        if not store.put_if_absent(CONFIG_KEY, encode_node(node)):
            node = _decode(store.get(CONFIG_KEY), store.uri)  # another process made it first
    node = check_node(node, CONFIG_TYPE, where=f"{CONFIG_KEY} in {store.uri}")
    found = node.get("hash")
    if found not in LAKE_HASHES:
        raise IntegrityError(f"lake {store.uri} names an unknown hash {found!r} in {CONFIG_KEY}")
    if hash is not None and hash != found:
        raise UsageError(
            f"lake {store.uri} hashes blocks with {found}; it cannot be opened with "
            f"hash={hash!r} (the hash is chosen once, when a lake is created)"
        )
    return node


def _decode(data: bytes, uri: str) -> dict[str, Any]:
    """The settings node from its stored bytes; damage is an IntegrityError naming the
    object and the way out (a newer format is left to ``check_node``: upgrade)."""

    def damaged(problem: str) -> IntegrityError:
        return IntegrityError(
            f"the lake's settings object {CONFIG_KEY!r} in {uri} is damaged: {problem}; "
            "nothing can open the lake until it is restored from a backup or written again: "
            "delete it, then connect with the hash the lake's blocks use (Python API: "
            "merkle.connect(uri, hash=...), blake3 unless the lake was made with sha2-256; "
            'doc/operations.md, "Damaged lake objects", says how to tell) and run merkle verify'
        )

    return decode_object(data, CONFIG_TYPE, damaged)
