"""What the tablet and tree code needs to know of a table: its key, families and limits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from merkle.blocks.cid import CID
from merkle.tablets.keys import KeyCodec
from merkle.tablets.nodes import BASE, Limits, TabletNode

__all__ = ["TableSpec", "family_blocks"]


def family_blocks(tablet: TabletNode) -> list[tuple[str, CID]]:
    """Every family block of a tablet with its family's name (``base`` included, a page's
    key block not): a version 1 tablet's segments, else each page's family blocks."""
    if not tablet.pages:
        return list(tablet.segments.items())
    return [(name, cid) for page in tablet.pages for name, cid in page.families.items() if cid]


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

    def misplaced(self, family: str, names: Iterable[str]) -> str | None:
        """What is out of place in a block of ``family`` holding columns ``names``, or None.

        A block is in this table's layout when its family is the table's (or ``base``)
        and each of its fields is one the table keeps in that family (the key column
        aside). Reads rely on it: a projection reads ``base`` and the families the
        table puts its fields in, so a field a block keeps elsewhere (a tablet written
        under other families, given to ``build_table``) would read as missing.
        """
        if family != BASE and family not in self.families:
            return f"a block of family {family!r}, which the table does not have"
        members = self.family_members()
        for name in names:
            if name != self.key_field and members.get(name, BASE) != family:
                return (
                    f"field {name!r} in the block of family {family!r}; the table keeps it "
                    f"in {members.get(name, BASE)!r}"
                )
        return None

    def families_for(self, fields: Sequence[str] | None) -> list[str] | None:
        """The families a projection needs (None: all of them)."""
        if fields is None:
            return None
        wanted = set(fields)
        return [BASE, *sorted(f for f, members in self.families.items() if wanted & set(members))]
