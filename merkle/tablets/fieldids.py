"""Field identities: which field of a table version is the same field as one of another.

Names alone cannot tell a field that was dropped (or renamed away) and then
added again under its old name from the field it replaced, and the two must
not be confused: a merge or a commit's replay would put the old field's
values into the new one. So each field of a typed table has an identity,
``(birth name, epoch)``: the name it was added under and the table's
*schema epoch* at that moment. The epoch counts the schema changes that took
a name away (a drop or a rename); it only grows along a table's history, so
a field added again after its name was freed is born in a later epoch and
has another identity. A rename keeps the identity; widening, making a field
nullable or schema-free keep it too.

Identities are stored sparsely in the table root (doc/format.md, "Table
root"): a field whose identity is ``(its name, 0)`` has no entry, so a table
that never dropped or renamed a field stores nothing new, and the roots
written before identities existed read as what they are: every field born
in epoch 0 under its name. Every root with a schema is written as format
version 3, so that a merkle-db from before identities refuses it instead of
writing it back without them (doc/format.md, "Typed nodes"). Two branches
that add the same name from the same epoch give it the same identity, so
adding a field on both sides of a merge is still the same change taken once.

This module derives identities; :mod:`merkle.tablets.nodes` stores them,
:mod:`merkle.tablets.table` keeps them up to date through every schema change,
and merges (:mod:`merkle.db.mergeschema`) and replays (:mod:`merkle.db.ops`)
compare them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from merkle.tablets.nodes import TableRoot

__all__ = ["FieldId", "carry_identities", "field_id", "identities", "with_identities"]

#: A field's identity: the name it was added under and the schema epoch it was added in.
FieldId = tuple[str, int]


def field_id(root: TableRoot, name: str) -> FieldId:
    """The identity of field ``name`` of the table version ``root``."""
    return root.field_ids.get(name, (name, 0))


def identities(root: TableRoot) -> dict[str, FieldId]:
    """Field name -> identity, for every field of the root's schema (empty without one)."""
    if root.schema is None:
        return {}
    return {name: field_id(root, name) for name in root.schema.names}


def _sparse(ids: Mapping[str, FieldId]) -> dict[str, FieldId]:
    """Only the identities that differ from the default ``(name, 0)``."""
    return {name: ident for name, ident in ids.items() if ident != (name, 0)}


def carry_identities(
    before: TableRoot, after: TableRoot, renamed: Mapping[str, str] | None = None
) -> TableRoot:
    """``after`` (a schema change of ``before``) with the field identities it continues.

    A field ``after`` keeps under its name, or under a name ``renamed`` (old ->
    new) gave it, keeps its identity; a field new to ``after`` is born in the
    epoch of the change, which is one past ``before``'s when the change took a
    name away (dropped or renamed a field).
    """
    if not after.typed or after.schema is None:
        return after
    renamed = {was: now for was, now in (renamed or {}).items() if was != now}
    old = identities(before) if before.typed else {}
    new_names = set(after.schema.names)
    freed = any(name not in new_names or name in renamed for name in old)
    epoch = before.schema_epoch + (1 if freed else 0)
    came_from = {now: was for was, now in renamed.items()}
    ids: dict[str, FieldId] = {}
    for name in after.schema.names:
        if name in came_from and came_from[name] in old:
            ids[name] = old[came_from[name]]  # renamed: the same field
        elif name in old and name not in renamed:
            ids[name] = old[name]  # kept its name
        else:
            ids[name] = (name, epoch)  # new, or a name another field left this change
    return replace(after, field_ids=_sparse(ids), schema_epoch=max(epoch, after.schema_epoch))


def with_identities(root: TableRoot, given: Mapping[str, FieldId], epoch: int) -> TableRoot:
    """``root`` whose fields named in ``given`` take those identities (a merge bringing
    fields from the other side keeps their identities), its epoch at least ``epoch``."""
    if not root.typed or root.schema is None:
        return root
    ids = identities(root)
    ids.update((name, ident) for name, ident in given.items() if name in ids)
    return replace(root, field_ids=_sparse(ids), schema_epoch=max(root.schema_epoch, epoch))
