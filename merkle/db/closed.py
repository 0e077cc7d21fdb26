"""What a closed connection says when it is used again.

``Connection.close()`` releases the connection's leases, stops its threads and
closes its store. Every later use of the lake through it (the journals, tags,
leases: opening, listing, history, creating, cloning, dropping, tagging,
merging, collecting, and committing any value it gave out) raises the
:class:`~merkle.errors.UsageError` made here, naming the lake and saying to
connect again. (It was a bare ``RuntimeError`` from the writer lease, raised
only at commit.) A ``Database`` value already in hand still reads its version:
its blocks are immutable and need no lease (see doc/api.md, "Connections").
"""

from __future__ import annotations

from merkle.errors import UsageError

__all__ = ["closed_error"]


def closed_error(uri: str) -> UsageError:
    """The error of a use of the closed connection to the lake at ``uri``."""
    return UsageError(
        f"the connection to {uri} is closed (close() was called, or its with block "
        f"ended): connect again, merkle.connect({uri!r}), to use the lake"
    )
