"""merkle-db: a versioned, content-addressed table store.

Every version of a database is an immutable Merkle DAG of blocks (DAG-CBOR
nodes and Arrow payloads keyed by CID) in a lake on memory, local files or S3.
"""

from merkle import errors

__version__ = "0.1.0"

__all__ = ["__version__", "errors"]
