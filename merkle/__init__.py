"""merkle-db: a versioned, content-addressed table store.

Every version of a database is an immutable Merkle DAG of blocks (DAG-CBOR
nodes and Arrow payloads keyed by CID) in a lake on memory, local files or
S3. Start with :func:`connect`::

    import merkle
    conn = merkle.connect("file:///data/lake")
    db = conn.create_db("shop")
    db = db.create_table("orders", key="order_id").write("orders", [...]).commit()
"""

from merkle import errors
from merkle.db import Connection, Database, connect
from merkle.gc import gc, verify  # after the package import: `merkle.gc` is the function
from merkle.tablets.schema import free_field
from merkle.transfer import sync

__version__ = "0.1.0"

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
