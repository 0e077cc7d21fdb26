"""The three-way merge of a table's schema, and theirs' rows made to fit the result.

A merge that brings their records into our table must also bring the fields
those records carry: a record is only what the schema shows of it, so a row
taken from their side with a field our schema lacks would lose that field on
the first read. Field by field, the side that changed a field since the base
wins (added, widened, made nullable, made schema-free); the same change on
both sides is taken once. What cannot be merged is a conflict of the whole
table, settled by ``"ours"``/``"theirs"`` or reported:

* a field changed differently on both sides (two types inferred for a new
  field, two widenings);
* a field dropped (or renamed, which is a drop and an add) on one side
  while the other side changed the table: merging would silently lose the
  other side's values of that field;
* a field added on both sides (one field: the same name from the same
  epoch) and renamed afterwards on one side: renamed on one side while the
  other changed the table, as above;
* a field gone on both sides while the two schemas still differ: renamed to
  two names, or dropped on one side and renamed on the other, cannot be told
  from two unrelated changes (dropped on both sides with otherwise identical
  schemas is no conflict: the schemas agree).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as _field

import pyarrow as pa

from merkle.tablets.evolve import SchemaChange, can_widen, plan_change, rewrite_rows
from merkle.tablets.fieldids import FieldId, identities
from merkle.tablets.rows import SortedRows
from merkle.tablets.schema import is_free
from merkle.tablets.table import Table

__all__ = ["SchemaMerge", "epoch_kept", "fit_rows", "merge_schemas"]


@dataclass(frozen=True)
class SchemaMerge:
    """The merged schema as changes: to our table, and to rows taken from theirs."""

    ours: SchemaChange | None  # None: our schema is the result already
    theirs: SchemaChange | None  # None: their rows fit the result as they are
    conflict: str | None = None  # why the schemas cannot be merged
    #: Identities of the fields ours takes from theirs, and the schema epoch the
    #: result needs (see merkle.tablets.fieldids): kept, so later merges know them.
    ids: Mapping[str, FieldId] = _field(default_factory=dict)
    epoch: int = 0


def _fields(schema: pa.Schema | None) -> dict[str, pa.Field]:
    return {f.name: f for f in schema} if schema is not None else {}


def _change_to(have: dict[str, pa.Field], want: dict[str, pa.Field]) -> SchemaChange | str | None:
    """The change that turns fields ``have`` into ``want`` (additions, widening, freeing).

    A string says why no such change exists.
    """
    add, widen, nullable, free = [], {}, [], []
    for name, field in want.items():
        old = have.get(name)
        if old is None:
            add.append(field.with_nullable(True))
            continue
        if old.equals(field, check_metadata=True):
            continue
        if is_free(field):
            if not is_free(old):
                free.append(name)
            continue
        if is_free(old):
            return f"field {name!r} is schema-free on one side and {field.type} on the other"
        if not old.type.equals(field.type):
            if not can_widen(old.type, field.type):
                return f"field {name!r} is {old.type} on one side and {field.type} on the other"
            widen[name] = field.type
        if field.nullable and not old.nullable:
            nullable.append(name)
    if not (add or widen or nullable or free):
        return None
    return SchemaChange(tuple(add), (), {}, widen, tuple(nullable), tuple(free))


def merge_schemas(base: Table | None, ours: Table, theirs: Table) -> SchemaMerge:
    """How ours' schema and theirs' rows change so both sides' records keep every field."""
    if not (ours.root.typed and theirs.root.typed):
        return SchemaMerge(None, None)
    b = _fields(base.root.schema if base is not None and base.root.typed else None)
    o, t = _fields(ours.root.schema), _fields(theirs.root.schema)
    ids_b = identities(base.root) if base is not None and base.root.typed else {}
    ids_o, ids_t = identities(ours.root), identities(theirs.root)
    if o == t and ids_o == ids_t:
        return SchemaMerge(None, None)
    for side, ids in (("our", ids_o), ("their", ids_t)):
        # Not the base's field under its name: added again after the base (born in a
        # later epoch), or another field renamed to the name. (A field that only has
        # another identity, e.g. one both sides added and a merge kept one identity
        # of, is neither.)
        for n in b:
            if n not in ids or n not in ids_b or ids[n] == ids_b[n]:
                continue
            if ids[n][0] != n:
                why = f"field {ids[n][0]!r} was renamed to {n!r}, a name the base's field left,"
                why += f" on {side} side"
            elif ids[n][1] > ids_b[n][1]:
                why = f"field {n!r} was dropped and added again on {side} side (a new field "
                why += "under the old name)"
            else:
                continue
            return SchemaMerge(None, None, f"{why} and the table changed on the other")
    result: dict[str, pa.Field] = {}
    taken: dict[str, FieldId] = {}  # identities of the fields only theirs added
    gone = [n for n in b if n not in o and n not in t]
    if gone:
        # Without field identities a rename is a drop and an add: two renames of one
        # field (or a drop and a rename) would keep both new names, or bring a dropped
        # field back under another name, with the field's values split between them.
        return SchemaMerge(
            None,
            None,
            f"field {gone[0]!r} was dropped or renamed on both sides and the schemas "
            "differ otherwise (a rename cannot be told from a drop and an add)",
        )
    for name in [*o, *(n for n in t if n not in o)]:
        bf, of, tf = b.get(name), o.get(name), t.get(name)
        if of is None or tf is None:
            gone_here = of is None and bf is not None
            gone_there = tf is None and bf is not None
            if gone_here or gone_there:
                side = "our" if gone_here else "their"
                return SchemaMerge(
                    None,
                    None,
                    f"field {name!r} was dropped or renamed on {side} side and the table "
                    "changed on the other",
                )
            added = of if of is not None else tf
            assert added is not None
            result[name] = added
            if of is None:
                taken[name] = ids_t[name]
        elif _same(tf, bf):
            result[name] = of
        elif _same(of, bf) or _same(of, tf):
            result[name] = tf
        else:
            return SchemaMerge(
                None, None, f"field {name!r} changed on both sides ({of.type} and {tf.type})"
            )
    for name in result:
        if name in ids_o and name in ids_t and ids_o[name] != ids_t[name]:
            # One field with two identities (added on both sides, or so merged before):
            # the merge keeps the earlier, so neither side's later merges see a re-add.
            taken[name] = min(ids_o[name], ids_t[name], key=_preferred(name))
    shared = _shared_identity(result, o, t, {**ids_o, **taken})
    if shared is not None:
        return SchemaMerge(None, None, shared)
    to_ours, to_theirs = _change_to(o, result), _change_to(t, result)
    for change in (to_ours, to_theirs):
        if isinstance(change, str):
            return SchemaMerge(None, None, change)
    assert not isinstance(to_ours, str)
    assert not isinstance(to_theirs, str)
    epoch = max(ours.root.schema_epoch, theirs.root.schema_epoch)
    return SchemaMerge(to_ours, to_theirs, ids=taken, epoch=epoch)


def _shared_identity(
    result: Mapping[str, pa.Field],
    o: Mapping[str, pa.Field],
    t: Mapping[str, pa.Field],
    ids: Mapping[str, FieldId],
) -> str | None:
    """Why the merged fields ``result`` (identities ``ids``) cannot be one schema: two of
    them are one field under two names, or None.

    A field added on both sides under one name from one epoch is one field (the
    same change taken once); renamed afterwards on one side, it is that field
    renamed on one side while the other side changed the table (it added the
    field), which is a conflict as for a field of the base. Merged, both names
    would carry one identity, a table root no reader accepts.
    """
    by_id: dict[FieldId, list[str]] = {}
    for name in result:
        by_id.setdefault(ids[name], []).append(name)
    for (birth, _epoch), names in by_id.items():
        if len(names) < 2:
            continue
        ours = [n for n in names if n in o and n not in t] or [n for n in names if n in o]
        theirs = [n for n in names if n in t and n not in o] or [n for n in names if n in t]
        return (
            f"field {birth!r}, added on both sides, is {ours[0]!r} on our side and "
            f"{theirs[0]!r} on their side: renamed on one side while the table changed "
            "on the other"
        )
    return None


def _preferred(name: str) -> Callable[[FieldId], tuple[bool, int, str]]:
    """The order in which a merge prefers one of a field's two identities: one born under
    the field's name, then the earlier epoch, then the birth name."""
    return lambda ident: (ident[0] != name, ident[1], ident[0])


def _same(x: pa.Field | None, y: pa.Field | None) -> bool:
    if x is None or y is None:
        return x is y
    return bool(x.equals(y, check_metadata=True))


def fit_rows(rows: SortedRows, theirs: Table, change: SchemaChange | None) -> SortedRows:
    """Rows stored under theirs' schema, stored as they would be under the merged one."""
    if change is None or not change.rewrites or not len(rows):
        return rows
    plan = plan_change(theirs.root.schema, theirs.key, theirs.root.families, change)
    return SortedRows(rewrite_rows(rows.table, plan, theirs.root.key_field), rows.keys)


def epoch_kept(merged: Table, *sides: Table | None) -> Table | None:
    """``merged`` with its schema epoch raised to the largest of the sides', or None when
    it is that already.

    Whichever side a merge takes a table from (its rows merged, or one side's
    table whole by ``resolve``), the result must not count fewer freed names
    than either side: a later drop and add would then be born in an epoch the
    other side already used for the same name, and the two fields would look
    like one (merkle/tablets/fieldids.py).
    """
    epoch = max((side.root.schema_epoch for side in sides if side is not None), default=0)
    if merged.root.schema_epoch >= epoch or not merged.root.typed:
        return None
    return merged.with_identities({}, epoch)
