"""Schema evolution: the changes ``alter_schema`` makes, and the rules they follow.

The rules, as Delta Lake users know them:

- **add** a field: always nullable (existing records have no value); a
  field of that name must not exist, nor carry merkle-db's own metadata
  (``merkle.*``) other than as :func:`~merkle.tablets.schema.free_field`
  makes it. Nothing is rewritten. Before a table's first write (no schema
  yet) its key fields come first, of type null (an ``add`` of one types it,
  with a type the table's key codec stores if ``create_table`` was given one).
- **make nullable**: a non-nullable field accepts nulls from now on.
  Nothing is rewritten.
- **widen** a field to a type that holds every value of the old one:
  int8 -> int16 -> int32 -> int64 (and unsigned to a wider unsigned or
  signed type), float16/float32 -> float64, int8/16/32 -> float64,
  decimal(p, s) -> decimal(p', s) with p' > p, string -> large_string,
  binary -> large_binary, date32 -> date64; a dictionary field to a
  wider index type (int8 -> int16, ...) and a value type it widens to, or to
  that value type itself (dictionary<int8, string> -> string): segments
  store dictionaries decoded, so only the root changes in meaning; a field of
  type null (at any depth: ``list<null>``) to any type. Anything narrower is a
  :class:`~merkle.errors.SchemaError`, and so is a key field widened to a type
  of another key codec (int32 -> float64: stored keys stay ``int``-encoded).
- **rename** a field (not a key field) to a free name.
- **drop** a field (not a key field).
- **free** a field: it becomes schema-free (any value, CBOR); existing values
  are kept exactly.

Widen, rename, drop and free rewrite every tablet (one pass, like a change of
families), so the stored columns always have the schema's storage types;
add and make-nullable change only the table root.
"""

from __future__ import annotations

import datetime
import zoneinfo
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from merkle.errors import SchemaError, UsageError
from merkle.tablets.conform import KeyLayout
from merkle.tablets.dicts import declarable_type, index_capacity
from merkle.tablets.keychecks import check_codec_fits
from merkle.tablets.keys import infer_key_codec_arrow
from merkle.tablets.nulltypes import fills_nulls
from merkle.tablets.schema import (
    check_declared_type,
    check_field_metadata,
    check_not_key_column,
    free_field,
    is_free,
    storage_type,
)
from merkle.tablets.segment import cbor_array, cbor_field, column_values

__all__ = ["SchemaChange", "can_widen", "plan_change", "rewrite_rows", "untyped_schema"]


@dataclass(frozen=True)
class SchemaChange:
    """One ``alter_schema`` call: every part optional, applied in the order of the fields below."""

    add: tuple[pa.Field, ...] = ()
    drop: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=dict)
    widen: Mapping[str, pa.DataType] = field(default_factory=dict)
    nullable: tuple[str, ...] = ()
    free: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        add: Any = None,
        drop: Any = None,
        rename: Any = None,
        widen: Any = None,
        nullable: Any = None,
        free: Any = None,
    ) -> SchemaChange:
        """A change from ``alter_schema``'s arguments, checked for form."""
        try:
            return cls._of(add, drop, rename, widen, nullable, free)
        except UnicodeEncodeError:  # Arrow cannot name a field so
            raise SchemaError(
                "alter_schema names a field whose name holds an unpaired surrogate, which "
                "UTF-8 cannot store"
            ) from None

    @classmethod
    def _of(
        cls, add: Any, drop: Any, rename: Any, widen: Any, nullable: Any, free: Any
    ) -> SchemaChange:
        added = []
        for item in [] if isinstance(add, Mapping) else _listed(add, "add", "fields"):
            if isinstance(item, pa.Field):
                check_field_metadata(item, "alter_schema(add=...)")
                added.append(item.with_type(declarable_type(item.type)).with_nullable(True))
            elif isinstance(item, tuple) and len(item) == 2:
                added.append(pa.field(str(item[0]), _type(item[1], str(item[0]))))
            else:
                raise SchemaError(f"add takes pyarrow fields or (name, type) pairs, got {item!r}")
        if isinstance(add, Mapping):
            added = [pa.field(str(n), _type(t, str(n))) for n, t in add.items()]
        for what, given in (("rename", rename), ("widen", widen)):
            if given is not None and not isinstance(given, Mapping):
                raise SchemaError(
                    f"alter_schema: {what} takes a mapping field name -> "
                    f"{'new name' if what == 'rename' else 'new type'}, got "
                    f"{type(given).__name__} {given!r}"
                )
        renamed = dict(rename or {})
        widened = {str(n): _type(t, str(n)) for n, t in (widen or {}).items()}
        for name, kind in [*((f.name, f.type) for f in added), *widened.items()]:
            check_declared_type(kind, name, "alter_schema")
        return cls(
            tuple(added),
            tuple(_names(drop, "drop")),
            {str(a): str(b) for a, b in renamed.items()},
            widened,
            tuple(_names(nullable, "nullable")),
            tuple(_names(free, "free")),
        )

    @property
    def rewrites(self) -> bool:
        """Whether stored columns change (widen, rename, drop, free)."""
        return bool(self.drop or self.rename or self.widen or self.free)


def _listed(value: Any, what: str, items: str = "field names") -> list[Any]:
    """``value`` as a list: None is empty, one name or field a list of it. A mapping or
    anything not iterable is a SchemaError: a dict for ``drop`` would otherwise be a
    list of its keys, or (as it once was) ignored, and the call change nothing."""
    if value is None:
        return []
    if isinstance(value, str | pa.Field):
        return [value]
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise SchemaError(
            f"alter_schema: {what} takes a list of {items}, got {type(value).__name__} {value!r}"
        )
    return list(value)


def _names(value: Any, what: str) -> list[str]:
    names = _listed(value, what)
    for name in names:
        if not isinstance(name, str) or not name:
            raise SchemaError(f"{what} takes field names, got {name!r}")
    return names


def _type(kind: Any, name: str) -> pa.DataType:
    """A type given to ``add`` or ``widen``; a dictionary of views (Polars' Categorical)
    is the dictionary of strings or bytes a first write of one makes."""
    if isinstance(kind, pa.DataType):
        return declarable_type(kind)
    if isinstance(kind, str):
        try:
            return pa.type_for_alias(kind)
        except (ValueError, KeyError):
            pass
    raise SchemaError(
        f"the type for field {name!r} must be a pyarrow type (or alias), got {kind!r}"
    )


_SIGNED = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UNSIGNED = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


def can_widen(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is a value of ``new`` (see the module doc)."""
    types = pa.types
    if old == new or types.is_null(old) or fills_nulls(old, new):
        return True  # null's one value (null) is a value of every type, at any depth
    if types.is_dictionary(old):
        if not types.is_dictionary(new):
            return can_widen(old.value_type, new)
        return bool(
            index_capacity(new.index_type) >= index_capacity(old.index_type)
            and can_widen(old.value_type, new.value_type)
        )
    if types.is_integer(old) and types.is_integer(new):
        if types.is_signed_integer(old):
            return bool(types.is_signed_integer(new) and new.bit_width >= old.bit_width)
        return bool(
            new.bit_width > old.bit_width
            or (types.is_unsigned_integer(new) and new.bit_width >= old.bit_width)
        )
    if types.is_integer(old) and new == pa.float64():
        return bool(old.bit_width <= 32)
    if types.is_floating(old) and types.is_floating(new):
        return bool(new.bit_width >= old.bit_width)
    if types.is_decimal(old) and types.is_decimal(new):
        return bool(new.scale == old.scale and new.precision >= old.precision)
    pairs = (
        (pa.string(), pa.large_string()),
        (pa.binary(), pa.large_binary()),
        (pa.date32(), pa.date64()),
    )
    # compared, not hashed: a user's extension type may be unhashable
    return any(old == a and new == b for a, b in pairs)


@dataclass(frozen=True)
class Plan:
    """A checked change: the new schema, families and key, and how stored rows change."""

    schema: pa.Schema
    families: dict[str, tuple[str, ...]]
    renamed: dict[str, str]  # stored column -> new name
    dropped: frozenset[str]
    retyped: dict[str, pa.DataType]  # new name -> storage type
    freed: frozenset[str]  # new names
    rewrite: bool


def untyped_schema(key: KeyLayout) -> pa.Schema:
    """What a change starts from on a table with no schema yet (created without one, never
    written): the key fields first, as a first write would put them, of type null until a
    write (or an add of them) types them."""
    return pa.schema([pa.field(n, pa.null()) for n in key.fields])


def plan_change(
    schema: pa.Schema | None,
    key: KeyLayout,
    families: Mapping[str, Sequence[str]],
    change: SchemaChange,
    codec: str | None = None,
) -> Plan:
    """The schema ``change`` makes of ``schema``; SchemaError for a change the rules forbid.

    ``codec`` is the table's key codec, if it has one: a key field typed by the change
    (added before the first write, or widened from null) must be of a type it stores.
    """
    fields = list(schema if schema is not None else untyped_schema(key))
    untyped_keys = set(key.fields) if schema is None else set()

    def index(name: str, what: str) -> int:
        names = [f.name for f in fields]
        if name not in names:
            raise SchemaError(f"cannot {what} field {name!r}: the table has no such field")
        return names.index(name)

    def not_key(name: str, what: str) -> None:
        if name in key.fields:
            raise SchemaError(f"cannot {what} {name!r}: it is a key field")

    for new in change.add:
        if new.name in untyped_keys:
            _check_key_codec(key, new.name, new.type, codec)
            untyped_keys.discard(new.name)
            fields[index(new.name, "add")] = new
            continue
        if new.name in [f.name for f in fields]:
            raise SchemaError(f"cannot add field {new.name!r}: the table has it already")
        check_not_key_column(new.name, key.fields)
        fields.append(new)
    dropped = set()
    for name in change.drop:
        not_key(name, "drop")
        dropped.add(name)
        del fields[index(name, "drop")]
    renamed: dict[str, str] = {}
    for old, new in change.rename.items():
        not_key(old, "rename")
        if new in [f.name for f in fields] or not new:
            raise SchemaError(f"cannot rename {old!r} to {new!r}: that name is taken")
        check_not_key_column(new, key.fields)
        i = index(old, "rename")
        fields[i] = fields[i].with_name(new)
        # Keyed by the stored (original) name: a chain in one call, {"a": "x", "b": "a"}
        # or a swap through a spare name, renames the field that now has the name.
        origin = next((was for was, now in renamed.items() if now == old), old)
        renamed[origin] = new
    retyped: dict[str, pa.DataType] = {}
    for name, kind in change.widen.items():
        i = index(name, "widen")
        old = fields[i]
        if is_free(old) or not can_widen(old.type, kind):
            raise SchemaError(
                f"cannot widen field {name!r} from {old.type} to {kind}: not every value of "
                f"the old type is a value of the new one (allowed: wider integers, "
                f"float16/32 -> float64, int8/16/32 -> float64, decimal precision, large "
                f"types, a wider dictionary index or the dictionary's value type, null at any "
                f"depth to any type)"
            )
        if name in key.fields:
            _check_key_widen(name, old.type, kind)
            if pa.types.is_null(old.type):
                _check_key_codec(key, name, kind, codec)
        fields[i] = old.with_type(kind)
        if name not in key.fields:
            retyped[name] = storage_type(kind)
    for name in change.nullable:
        i = index(name, "make nullable")
        not_key(name, "make nullable")
        fields[i] = fields[i].with_nullable(True)
    freed = set()
    for name in change.free:
        not_key(name, "make schema-free")
        i = index(name, "make schema-free")
        if not is_free(fields[i]):
            fields[i] = free_field(name)
            freed.add(name)
    return Plan(
        pa.schema(fields),
        _carried_families(families, renamed, dropped),
        renamed,
        frozenset(dropped),
        retyped,
        frozenset(freed),
        change.rewrites,
    )


def _carried_families(
    families: Mapping[str, Sequence[str]], renamed: Mapping[str, str], dropped: set[str]
) -> dict[str, tuple[str, ...]]:
    """The table's families after a schema change: members renamed, dropped ones gone.

    Every family is kept, in its order, an empty one too (declared empty, or emptied by
    dropping its only member): a change of the schema does not change which families
    the table declares, so ``describe_table`` and ``diff`` report only what was asked.
    A family may list a name no field has yet (reserved for a later write); a rename to
    such a name puts the renamed field in that family. When the renamed field is in
    another family already, the field would be in two, which the format forbids
    (doc/format.md, "Families"): a SchemaError naming both families. In the same
    family the two names are one member.
    """
    home = {m: fam for fam, members in families.items() for m in members}
    for was, now in renamed.items():
        reserved = home.get(now)
        if reserved is None or now in renamed or now in dropped:
            continue  # no family lists the new name, or its holder renamed/dropped it
        if home.get(was, reserved) != reserved:
            raise SchemaError(
                f"cannot rename {was!r} to {now!r}: family {reserved!r} already lists "
                f"{now!r} while {was!r} is in family {home[was]!r}, and a field belongs to "
                f"at most one family; take {now!r} out of {reserved!r} (or {was!r} out of "
                f"{home[was]!r}) with alter_families first, or rename {was!r} to another name"
            )
    carried: dict[str, tuple[str, ...]] = {}
    for fam, members in families.items():
        names = [renamed.get(m, m) for m in members if m not in dropped]
        carried[fam] = tuple(dict.fromkeys(names))  # a rename onto a name of its own family
    return carried


def _check_key_widen(name: str, old: pa.DataType, new: pa.DataType) -> None:
    """SchemaError unless key field ``name`` of type ``old`` may become ``new``.

    Stored keys are encoded by the table's key codec, chosen from the key
    field's type; a widening that calls for another codec (int32 -> float64:
    ``int`` to ``float``) would leave every stored key, and the codec, as they
    were while the schema said otherwise. So a key field widens only within
    its codec (wider integers, string -> large_string, binary -> large_binary,
    float32 -> float64); a key field of type null (never written) takes any
    key type.
    """
    try:
        target = infer_key_codec_arrow(new).spec
        source = None if pa.types.is_null(old) else infer_key_codec_arrow(old).spec
    except UsageError:
        target, source = "", "?"
    if source is None or source == target:
        return
    raise SchemaError(
        f"cannot widen key field {name!r} from {old} to {new}: its stored keys are encoded as "
        f"{source!r} keys, and {new} would need {target or 'a codec no key type has'!r}; a key "
        f"field widens only to a type of the same key codec (a wider integer, string -> "
        f"large_string, binary -> large_binary, float32 -> float64): copy the table into a "
        f"new one keyed by the new type instead"
    )


def _check_key_codec(key: KeyLayout, name: str, kind: pa.DataType, codec: str | None) -> None:
    """SchemaError unless key codec ``codec`` (None: not chosen yet) stores key field
    ``name`` as type ``kind``: a key field typed before the first write must be of a type
    of the codec ``create_table`` was given, as a declared schema must
    (:func:`~merkle.tablets.keychecks.check_codec_fits`), else no write would fit both."""
    if codec is None:
        return
    types = [kind if field == name else None for field in key.fields]
    check_codec_fits(key.fields, types, codec, SchemaError)


def rewrite_rows(rows: pa.Table, plan: Plan, key_column: str) -> pa.Table:
    """Stored rows of one tablet changed by ``plan`` (columns still sorted by name)."""
    columns: dict[str, tuple[pa.Field, Any]] = {}

    def record_name(i: int) -> str:
        key = rows.column(key_column)[i].as_py()
        return f"the record with key {tuple(key.values()) if isinstance(key, dict) else key!r}"

    for stored, column in zip(rows.schema, rows.columns, strict=True):
        name = stored.name
        if name == key_column:
            continue
        if name in plan.dropped:
            continue
        name = plan.renamed.get(name, name)
        if name in plan.freed:
            values = _in_zone(
                column_values(
                    pa.table([column], schema=pa.schema([stored])), stored.name, freeing=record_name
                ),
                stored.type,
            )
            columns[name] = (cbor_field(name), cbor_array(name, values, record_name))
        elif name in plan.retyped:
            kind = plan.retyped[name]
            columns[name] = (pa.field(name, kind), column.cast(kind))
        else:
            columns[name] = (stored.with_name(name), column)
    names = sorted(columns)
    return pa.Table.from_arrays(
        [rows.column(key_column), *(columns[n][1] for n in names)],
        schema=pa.schema([rows.schema.field(key_column), *(columns[n][0] for n in names)]),
    )


def _in_zone(values: list[Any], kind: pa.DataType) -> list[Any]:
    """Datetimes of a zoned timestamp field in the field's zone, not UTC, before ``free``.

    Records of a ``tz="America/New_York"`` field hold New York times; CBOR
    keeps a datetime's offset, so freed values keep their wall time and offset
    (CBOR has no zone names: the offset is what remains of the zone).
    """
    if not pa.types.is_timestamp(kind) or kind.tz in (None, "UTC", "+00:00"):
        return values
    try:
        zone: datetime.tzinfo = zoneinfo.ZoneInfo(kind.tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        try:
            offset = datetime.datetime.strptime(kind.tz.replace(":", ""), "%z").tzinfo
        except ValueError:
            return values
        if offset is None:
            return values
        zone = offset
    return [v.astimezone(zone) if isinstance(v, datetime.datetime) else v for v in values]
