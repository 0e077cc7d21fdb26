"""Table schemas: which fields a table has, their Arrow types, and how a schema is stored.

A table's schema is a ``pyarrow.Schema`` in the order the fields were first
written (or declared): every Arrow type is kept exactly (integer widths,
decimals, structs, lists, maps, dictionaries, fixed-size binary, timestamps
with unit and zone name, dates, durations, large types). A field whose
metadata says ``merkle.encoding: cbor`` is *schema-free*: it holds any value
the record model can carry, stored as CBOR (see ``doc/format.md``). That is
a per-field choice (:func:`free_field`), never the result of one odd value.

This module knows types and names only; how values are checked against a
schema is :mod:`merkle.tablets.conform`, how a schema may change is
:mod:`merkle.tablets.evolve`. None of it depends on how rows are cut into
tablets or segments.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.errors import IntegrityError, SchemaError
from merkle.tablets.dicts import check_dictionaries, declarable_type
from merkle.tablets.freeform import unknown_time_zone
from merkle.tablets.nesting import check_nesting
from merkle.tablets.numpytimes import (
    NUMPY_TIMES,
    check_numpy_mix,
    finest_unit,
    inferable,
    is_nat,
    numpy_time_kind,
    numpy_time_type,
)
from merkle.tablets.segment import cbor_field, is_cbor_field
from merkle.tablets.storedform import plain_type, served_type, storage_type

__all__ = [
    "check_declared_type",
    "check_field_metadata",
    "check_not_key_column",
    "check_schema",
    "check_time_zones",
    "composite_column",
    "decode_schema",
    "encode_schema",
    "free_field",
    "infer_type",
    "is_free",
    "is_list_type",
    "key_schema_fields",
    "plain_type",
    "served_type",
    "show_value",
    "storage_type",
    "type_family",
]


def free_field(name: str) -> pa.Field:
    """A schema-free field: any record value, stored as CBOR, read back exactly as written."""
    return cbor_field(name)


def is_list_type(kind: pa.DataType) -> bool:
    """Whether ``kind`` is a list of any width (list, large list, fixed-size list)."""
    types = pa.types
    return bool(types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind))


def is_free(field: pa.Field) -> bool:
    """Whether ``field`` is schema-free (its values are CBOR-encoded)."""
    return is_cbor_field(field)


def composite_column(names: Sequence[str]) -> str:
    """The name of the segment column that holds a composite key ``names`` as one struct.

    Segments keep one key column (``doc/format.md``, "Segments"); a key of
    several fields is stored as a struct of them under this name, which a user
    field may not take.
    """
    return "(" + ",".join(names) + ")"


def check_not_key_column(name: str, key: str | Sequence[str]) -> None:
    """SchemaError when field ``name`` would take the segment column of a composite ``key``.

    A field of that name would stand beside the key's struct column in every
    segment, and no read or write of the table could tell them apart; declared,
    added, renamed or made schema-free, the name is refused before anything is
    committed.
    """
    names = [key] if isinstance(key, str) else list(key)
    if len(names) > 1 and name == composite_column(names):
        raise SchemaError(
            f"{name!r} is reserved for the composite key {names} (merkle-db stores the key "
            "under that name): give the field another name"
        )


# -- the stored form -------------------------------------------------------------


def encode_schema(schema: pa.Schema) -> bytes:
    """The bytes a table root keeps: an Arrow IPC schema message (schema metadata dropped).

    Any Arrow implementation reads it (``pyarrow.ipc.read_schema``); field
    metadata, such as the schema-free marker, is part of it.
    """
    return bytes(schema.remove_metadata().serialize().to_pybytes())


def decode_schema(data: bytes, where: object = None) -> pa.Schema:
    """The schema of :func:`encode_schema` bytes; IntegrityError when they are not one."""
    try:
        return pa.ipc.read_schema(pa.py_buffer(bytes(data)))
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise IntegrityError(f"table root {where} holds a malformed schema: {exc}") from None


def check_schema(schema: Any, key: str | Sequence[str] = ()) -> pa.Schema | None:
    """A declared schema (a ``pyarrow.Schema``, or a list of ``pyarrow.Field``), checked.

    Field names must be non-empty and unique and include the ``key`` fields (none the
    name of a composite key's column); schema metadata is dropped. A dictionary of views
    becomes the dictionary of strings or bytes a first write of one makes
    (:func:`~merkle.tablets.dicts.declarable_type`).
    """
    if schema is None:
        return None
    if not isinstance(schema, pa.Schema):
        try:
            schema = pa.schema(schema)
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise SchemaError(
                f"schema must be a pyarrow.Schema (or a list of pyarrow fields), got "
                f"{type(schema).__name__}: {exc}"
            ) from None
    names = schema.names
    for name in names:
        if not name:
            raise SchemaError("a schema field needs a non-empty name")
    repeated = sorted(n for n, times in Counter(names).items() if times > 1)
    if repeated:
        raise SchemaError(f"the schema names fields {repeated} more than once")
    for name in names:
        check_not_key_column(name, key)
    for field in key_schema_fields(schema, [key] if isinstance(key, str) else list(key)):
        if is_cbor_field(field):
            raise SchemaError(
                f"the schema declares the key field {field.name!r} schema-free: a key field "
                "cannot be schema-free (its key codec orders its values); give it a type"
            )
    for field in schema:
        check_field_metadata(field, "create_table(schema=...)")
    # A dictionary of views (Polars' Categorical) is declared as the field a first write
    # of it makes: Arrow builds no dictionary of views, so it holds strings (or bytes).
    schema = pa.schema([f.with_type(declarable_type(f.type)) for f in schema])
    for field in schema:
        check_declared_type(field.type, field.name, "create_table(schema=...)")
    return schema


def check_time_zones(kind: pa.DataType, name: str, where: str) -> None:
    """SchemaError when a timestamp of ``kind`` (field ``name``) names an unknown time zone.

    Arrow stores any zone string, but every read as records turns the values
    into datetimes of that zone and would fail on each one: a schema is
    refused such a zone when declared, added or learned from a write.
    """
    zone = unknown_time_zone(kind)
    if zone is not None:
        raise SchemaError(
            f"{where}: field {name!r} is {kind}, whose time zone {zone!r} is unknown: use an "
            "IANA zone name (such as 'UTC' or 'Europe/Paris') or an offset (such as '+05:30')"
        )


def check_declared_type(kind: pa.DataType, name: str, where: str) -> None:
    """SchemaError when a field type declared, added or learned from a write (``where``)
    is one every read of the field would fail on: an unknown time zone, or a dictionary
    no read can rebuild (:func:`~merkle.tablets.dicts.check_dictionaries`); or one no
    commit could store, nested deeper than Arrow IPC holds
    (:func:`~merkle.tablets.nesting.check_nesting`: first, as the other checks recurse)."""
    check_nesting(kind, name, where)
    check_time_zones(kind, name, where)
    check_dictionaries(kind, name, where)


#: Field metadata keys that start so are merkle-db's own (``merkle.encoding``).
RESERVED_METADATA_PREFIX = b"merkle."


def check_field_metadata(field: pa.Field, where: str) -> None:
    """SchemaError when a user-given field carries merkle-db's own metadata other than as
    :func:`free_field` makes it.

    ``merkle.encoding: cbor`` marks a column of CBOR values: on a field of any
    other type, or next to other ``merkle.*`` keys, every write to the field
    would fail inside Arrow. A field exactly as ``free_field`` gives it is
    the documented way to declare a schema-free field, and is accepted.
    """
    metadata = field.metadata or {}
    reserved = sorted(k for k in metadata if k.startswith(RESERVED_METADATA_PREFIX))
    if not reserved or free_field(field.name).equals(field, check_metadata=True):
        return
    if field.with_nullable(True).equals(free_field(field.name), check_metadata=True):
        return
    names = ", ".join(k.decode("utf-8", "replace") for k in reserved)
    raise SchemaError(
        f"{where}: field {field.name!r} carries metadata {names}, which merkle-db reserves "
        f"for its own use: drop that metadata; to make a field schema-free use "
        f"merkle.free_field({field.name!r}) or alter_schema(table, free=[{field.name!r}])"
    )


def with_free_fields(
    schema: pa.Schema | None, free: bool | Sequence[str], key: str | Sequence[str] = ()
) -> tuple[pa.Schema | None, bool]:
    """A declared schema with ``free`` fields made schema-free, and the table-wide choice.

    ``free`` is True (every field not in ``schema`` is schema-free, the ``key``
    fields excepted), False, or field names (declared schema-free; appended
    when ``schema`` lacks them), never a key field's.
    """
    if isinstance(free, bool):
        return schema, free
    if isinstance(free, str) or not isinstance(free, Iterable):
        raise SchemaError(f"schema_free must be True, False or a list of field names, got {free!r}")
    key_fields = [key] if isinstance(key, str) else list(key)
    # No schema yet: the key fields come first, of type null until the first write types
    # them (as alter_schema(add=) of a table never written does); the free fields alone
    # made a table whose reads had no key column, and whose key came after them once
    # written.
    fields = list(schema) if schema is not None else [pa.field(n, pa.null()) for n in key_fields]
    names = [f.name for f in fields]
    for name in free:
        if not isinstance(name, str) or not name:
            raise SchemaError(f"schema_free names fields; {name!r} is not a field name")
        check_not_key_column(name, key)
        if name in key_fields:
            # A schema-free key became a table whose every write and lookup failed.
            raise SchemaError(
                f"schema_free names the key field {name!r}: a key field cannot be "
                "schema-free (its key codec orders its values); leave it out"
            )
        if name in names:
            fields[names.index(name)] = free_field(name)
        else:
            fields.append(free_field(name))
            names.append(name)
    return pa.schema(fields), False


def key_schema_fields(schema: pa.Schema, names: Sequence[str]) -> list[pa.Field]:
    """The schema's fields of the key ``names``, in key order (SchemaError for a missing one)."""
    missing = [name for name in names if name not in schema.names]
    if missing:
        raise SchemaError(
            f"the schema has no field {missing[0]!r} of the key {list(names)}: "
            "declare every key field in the schema"
        )
    return [schema.field(name) for name in names]


# -- families of types -----------------------------------------------------------


def type_family(kind: pa.DataType) -> str:
    """The family of a type: values convert exactly only within one family.

    Integers, floats and decimals are ``number``; string types ``string``;
    binary types ``binary``; list types ``list`` (views too: a ``list_view``
    holds a ``list``'s values, as a ``string_view`` holds a ``string``'s); and so
    on. A string never becomes a number (``"12"`` into an int field is a
    SchemaError, not 12).
    """
    types = pa.types
    checks: list[tuple[Callable[[pa.DataType], bool], str]] = [
        (types.is_dictionary, ""),
        (types.is_boolean, "bool"),
        (lambda k: types.is_integer(k) or types.is_floating(k) or types.is_decimal(k), "number"),
        (
            lambda k: types.is_string(k) or types.is_large_string(k) or str(k) == "string_view",
            "string",
        ),
        (
            lambda k: (
                types.is_binary(k)
                or types.is_large_binary(k)
                or types.is_fixed_size_binary(k)
                or str(k) == "binary_view"
            ),
            "binary",
        ),
        (types.is_timestamp, "timestamp"),
        (types.is_date, "date"),
        (types.is_time, "time"),
        (types.is_duration, "duration"),
        (types.is_struct, "struct"),
        (types.is_map, "map"),
        (
            lambda k: (
                types.is_list(k)
                or types.is_large_list(k)
                or types.is_fixed_size_list(k)
                or types.is_list_view(k)
                or types.is_large_list_view(k)
            ),
            "list",
        ),
        (types.is_null, "null"),
    ]
    for check, family in checks:
        if check(kind):
            return type_family(kind.value_type) if family == "" else family
    return str(kind)


# -- inference from Python values ------------------------------------------------

_KINDS: list[tuple[type | tuple[type, ...], str]] = [
    (bool, "bool"),
    ((int, float), "number"),
    (str, "str"),
    ((bytes, bytearray, memoryview), "bytes"),
    (datetime.datetime, "datetime"),
    (datetime.date, "date"),
    (datetime.time, "time"),
    (datetime.timedelta, "timedelta"),
    (decimal.Decimal, "decimal"),
    (uuid.UUID, "uuid"),
    (dict, "dict"),
    ((list, tuple, set, frozenset), "list"),
]


def _kind(value: Any) -> str:
    if isinstance(value, NUMPY_TIMES):  # its item() is a date, a datetime or an int
        return numpy_time_kind(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, datetime.datetime):
        return "aware datetime" if value.utcoffset() is not None else "naive datetime"
    for types, kind in _KINDS:
        if isinstance(value, types):
            return kind
    return type(value).__name__


def show_value(value: Any) -> str:
    """A short repr of a value for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def infer_type(name: str, values: Iterable[Any], key_of: Callable[[int], Any]) -> pa.DataType:
    """The Arrow type of a new field from its first values (None entries are absent).

    pyarrow's inference, after a check that the values are of one kind: ints
    with floats are numbers (float64), but ``1`` with ``"a"``, a naive with an
    aware datetime, or bytes with str, is a SchemaError naming the field, the
    keys and values that disagree, and what to do (declare the field
    schema-free, or write one type). ``key_of(i)`` is the key of row ``i``.
    numpy's ``datetime64`` and ``timedelta64`` are typed by their unit
    (:mod:`merkle.tablets.numpytimes`), the finest of them with Python's
    ``datetime`` (microseconds) where they meet; ``NaT`` is None.
    """
    present = [(i, v) for i, v in enumerate(values) if v is not None and not is_nat(v)]
    if not present:
        return pa.null()
    first_kind: dict[str, tuple[int, Any]] = {}
    for i, value in present:
        first_kind.setdefault(_kind(value), (i, value))
    if len(first_kind) > 1:
        (k1, (i1, v1)), (k2, (i2, v2)) = list(first_kind.items())[:2]
        raise SchemaError(
            f"field {name!r} holds values of different kinds: {k1} {show_value(v1)} "
            f"(key {show_value(key_of(i1))}) and {k2} {show_value(v2)} "
            f"(key {show_value(key_of(i2))}): write one type, or declare the field "
            f"schema-free (create_table(schema=...) with merkle.free_field({name!r}), "
            f"or alter_schema(table, free=[{name!r}]))"
        )
    try:
        kind = _inferred([v for _, v in present])
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        i, value = present[0]
        raise SchemaError(
            f"field {name!r} has no Arrow type for its values (key {show_value(key_of(i))}, "
            f"value {show_value(value)}: {exc}): declare the field's type in the schema, "
            f"or declare it schema-free (merkle.free_field({name!r}))"
        ) from None
    check_declared_type(kind, name, "the records")
    return kind


def _inferred(values: list[Any]) -> pa.DataType:
    """pyarrow's type of ``values`` (none None, all of one kind), with numpy scalars
    typed as their Python values are but numpy times, typed by their unit."""
    dtypes = {v.dtype: v for v in values if isinstance(v, NUMPY_TIMES)}
    if dtypes:  # one of each unit: its type is its unit's
        kinds = [numpy_time_type(v) for v in dtypes.values()]
        others = [v for v in values if not isinstance(v, NUMPY_TIMES)]
        if others:
            kinds.append(_inferred(others))
        if pa.types.is_date(kinds[0]):
            return pa.date32()
        unit = finest_unit([k.unit for k in kinds])
        return pa.timestamp(unit) if pa.types.is_timestamp(kinds[0]) else pa.duration(unit)
    plain = [v.item() if isinstance(v, np.generic) else v for v in values]
    check_numpy_mix(plain)  # pyarrow crashes on them (SIGSEGV) instead of raising
    try:
        return pa.array(plain).type
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        given = inferable(plain)  # numpy times inside lists and dicts, units met
        if given is plain:
            raise
        check_numpy_mix(given)
        return pa.array(given).type


def plain_scalars(values: list[Any]) -> bool:
    """Numpy and pandas scalars of ``values`` replaced, in place, by what they mean.

    ``np.bool_`` is a bool (an int field refuses it, as it refuses True) and
    pandas' ``NaT`` is a null. Returns whether a value is a pandas
    ``Timestamp`` or ``Timedelta``, which may hold nanoseconds
    (:func:`check_nanoseconds`).
    """
    kinds = {type(value) for value in values}
    plain = {datetime.datetime, datetime.timedelta}
    odd = {k for k in kinds if k is np.bool_ or (k not in plain and issubclass(k, tuple(plain)))}
    if not odd:
        return False
    for i, value in enumerate(values):
        if type(value) in odd:
            if type(value) is np.bool_:
                values[i] = bool(value)
            elif value != value:  # NaT (not equal to itself, as NaN)
                values[i] = None
    return any(k is not np.bool_ for k in odd)


def check_nanoseconds(
    name: str, values: list[Any], kind: pa.DataType, key_of: Callable[[int], Any]
) -> None:
    """SchemaError for a pandas value with nanoseconds bound for a ``kind`` coarser than ns.

    pyarrow drops the nanoseconds of a ``pd.Timestamp`` or ``pd.Timedelta``
    converted to microseconds without a word; a value must fit its field exactly.
    """
    if not (pa.types.is_timestamp(kind) or pa.types.is_duration(kind)) or kind.unit == "ns":
        return
    for i, value in enumerate(values):
        if getattr(value, "nanosecond", 0) or getattr(value, "nanoseconds", 0):
            raise SchemaError(
                f"field {name!r} is {kind}: the value {show_value(value)} of the record with key "
                f"{show_value(key_of(i))} has nanoseconds, which it cannot hold: declare the "
                f"field with unit 'ns' (create_table(schema=...) or alter_schema(table, "
                f"add=[({name!r}, pa.{'timestamp' if pa.types.is_timestamp(kind) else 'duration'}"
                f"('ns'))]) before the first write of it), write Arrow, or round the value"
            )
