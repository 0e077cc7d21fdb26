"""The database API: ``connect``, ``Connection`` and immutable ``Database`` values."""

from merkle.db.connection import Connection, connect
from merkle.db.database import Database

__all__ = ["Connection", "Database", "connect"]
