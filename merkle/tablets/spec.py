"""What the tablet and tree code needs to know of a table: its key, families and limits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from merkle.tablets.keys import KeyCodec
from merkle.tablets.nodes import BASE, Limits

__all__ = ["TableSpec"]


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A table's key column and codec, its field families and its shape limits."""

    key_field: str
    codec: KeyCodec
    families: dict[str, tuple[str, ...]]
    limits: Limits

    def family_members(self) -> dict[str, str]:
        """Field name -> family, for the fields that belong to a family."""
        return {f: fam for fam, members in self.families.items() for f in members}

    def families_for(self, fields: Sequence[str] | None) -> list[str] | None:
        """The families a projection needs (None: all of them)."""
        if fields is None:
            return None
        wanted = set(fields)
        return [BASE, *sorted(f for f, members in self.families.items() if wanted & set(members))]
