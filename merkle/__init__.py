"""merkle-db: a versioned, content-addressed table store.

Every version of a database is an immutable Merkle DAG of blocks (DAG-CBOR
nodes and Arrow payloads keyed by CID) in a lake on memory, local files or
S3. Start with :func:`connect`::

    import merkle
    conn = merkle.connect("file:///data/lake")
    db = conn.create_db("shop")
    db = db.create_table("orders", key="order_id").write("orders", [...]).commit()
"""

from typing import Any

from merkle import errors
from merkle.db import Connection, Database, connect
from merkle.gc import gc, verify  # after the package import: `merkle.gc` is the function
from merkle.tablets.schema import free_field

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # merkle.sync is imported on first use: its CAR code pulls in multiformats,
    # which a command that does not move versions between lakes should not pay for.
    if name == "sync":
        from merkle.transfer import sync

        return sync
    raise AttributeError(f"module 'merkle' has no attribute {name!r}")


__all__ = [
    "Connection",
    "Database",
    "__version__",
    "connect",
    "errors",
    "free_field",
    "gc",
    "sync",
    "verify",
]
