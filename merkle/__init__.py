"""merkle-db: a versioned, content-addressed table store.

Every version of a database is an immutable Merkle DAG of blocks (DAG-CBOR
nodes and Arrow payloads keyed by CID) in a lake on memory, local files or
S3. Start with :func:`connect`::

    import merkle
    conn = merkle.connect("file:///data/lake")
    db = conn.create_db("shop")
    db = db.create_table("orders", key="order_id").write("orders", [...]).commit()

The public names are imported on first use (``merkle.connect`` loads the
database layer, ``merkle.gc`` the collector, ``merkle.sync`` the CAR code), so
that ``import merkle`` and a command that reads one record pay only for what
they use.
"""

import importlib
from typing import TYPE_CHECKING, Any

from merkle import errors
from merkle.lazy import lazy_attributes

# `merkle.gc` is the collector *function*, but importing the package merkle.gc
# binds the package as the attribute `gc` of merkle, whenever it first happens.
# So the package (cheap: its own names load on use) is imported now, its
# binding dropped, and __getattr__ below serves the function from then on.
importlib.import_module("merkle.gc")
del globals()["gc"]

if TYPE_CHECKING:
    from merkle.db import Connection, Database, connect
    from merkle.gc import gc, verify
    from merkle.tablets.schema import free_field
    from merkle.transfer import sync

__version__ = "0.1.0"

_names = lazy_attributes(
    __name__,
    {
        "Connection": "merkle.db.connection",
        "Database": "merkle.db.database",
        "connect": "merkle.db.connection",
        "free_field": "merkle.tablets.schema",
        "gc": "merkle.gc.collect",
        "sync": "merkle.transfer.sync",
        "verify": "merkle.gc.verify",
    },
)

#: The subpackages ``import merkle`` used to import, imported on first use now, so
#: that ``merkle.db.Database`` and the like still work without an import of their own.
_SUBPACKAGES = frozenset({"blocks", "db", "refs", "storage", "tablets"})


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    return _names(name)


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


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
