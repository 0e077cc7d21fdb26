"""The database root node: the state rollup of one database version.

``{type: merkle/db, v: 1, tables: {name: link}, meta, updated_at}``: every
table of the version is reachable from this one block, so a commit, a clone
and a time-travel read each deal in a single CID.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from merkle.blocks.cid import CID
from merkle.blocks.codec import NODE_VERSION, check_node
from merkle.errors import IntegrityError

__all__ = ["DB_ROOT", "DbRoot"]

DB_ROOT = "merkle/db"


@dataclass(frozen=True)
class DbRoot:
    """Tables by name, the user's metadata, and when the version was made."""

    tables: dict[str, CID] = field(default_factory=dict)
    meta: Any = None
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def to_node(self) -> dict[str, Any]:
        return {
            "type": DB_ROOT,
            "v": NODE_VERSION,
            "tables": dict(sorted(self.tables.items())),
            "meta": self.meta,
            "updated_at": self.updated_at.isoformat(timespec="microseconds"),
        }

    @classmethod
    def from_node(cls, node: Any, where: object = None) -> DbRoot:
        node = check_node(node, DB_ROOT, where=where)
        try:
            tables = node["tables"]
            if not all(isinstance(k, str) and isinstance(v, CID) for k, v in tables.items()):
                raise TypeError("tables must map names to links")
            updated = datetime.fromisoformat(node["updated_at"])
            return cls(dict(tables), node.get("meta"), updated)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IntegrityError(f"database root {where} is malformed: {exc}") from exc
