"""What a field with ``null`` inside its type learns from written records.

A field typed with ``null`` somewhere inside (``list<null>``, ``struct<a: null>``,
``map<string, null>``, ``dictionary<int32, null>``) gets, from a later write of
values, the type those values have at that place
(:func:`~merkle.tablets.nulltypes.refined`, doc/api.md "A new field"). For
Arrow data that type is the column's; for records it is inferred from the
Python values (:func:`~merkle.tablets.schema.infer_type`).

The inferred type is then put in the field's shape where Python values have
none of their own. pyarrow infers every list as ``list`` (a Python list has no
width), so where the field has a ``large_list`` or a fixed-size list the
inferred list is taken as one (``large_list<null>`` learns
``large_list<int64>`` from ``[3]``; a list of another length is then refused
by a fixed-size list, as before). And pyarrow never infers a map: a map's
value, a dict or a list of ``(key, value)`` pairs, is inferred as a struct of
its keys, or not at all. So the values are first given, at every place the
field's type has a map, the form of the list of their
entries as ``{"key": k, "value": v}`` dicts, inferred as
``list<struct<key, value>>``, which is read back as ``map<key, value>`` there.
A struct given as a tuple of its members in order (as pyarrow takes one) is
inferred as a list: it is given as the dict of its members. That walk follows
the field's type only down to its maps and structs (every map: one given as
pairs has no inferred type, and would keep a ``null`` beside it from being
learned); other values are inferred as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.errors import SchemaError
from merkle.tablets.fits import apply_convert, over_items
from merkle.tablets.nulltypes import refined
from merkle.tablets.schema import check_declared_type, infer_type, is_list_type

__all__ = ["learned_field"]

Reshape = Callable[[Any], Any]


def learned_field(
    field: pa.Field, name: str, values: list[Any], key_of: Callable[[int], Any]
) -> pa.Field:
    """``field`` with the nulls inside its type given the type ``values`` (the records'
    values of field ``name``; ``key_of(i)`` the key of record ``i``) have there;
    ``field`` itself when they teach nothing, or when they have no one type (they are
    then refused as not fitting it). SchemaError when the type learned is one no field
    can have (a dictionary of lists, say)."""
    reshape = _reshaper(field.type)
    given = values if reshape is None else [None if v is None else reshape(v) for v in values]
    try:
        kind = infer_type(name, given, key_of)
    except SchemaError:
        return field
    learned = refined(field.type, _shaped(field.type, kind))
    if learned == field.type:
        return field
    check_declared_type(learned, name, "the records")  # a dictionary of lists, say
    return field.with_type(learned)


def _reshaper(kind: pa.DataType) -> Reshape | None:
    """The reshaping of one value of ``kind`` that makes its maps and structs
    inferable (see the module doc); None when ``kind`` has neither. Every map is
    reshaped, not only one with ``null`` inside: a map given as ``(key, value)``
    pairs has no inferred type at all, and would keep a ``null`` beside it from being
    learned."""
    if not _has_map_or_struct(kind):
        return None
    if pa.types.is_map(kind):
        return _map_reshaper(kind)
    if is_list_type(kind):
        inner = _reshaper(kind.value_type)
        if inner is None:
            return None
        return over_items(inner)
    if pa.types.is_struct(kind):
        members = {f.name: _reshaper(f.type) for f in kind}
        names = list(members)

        def struct(value: Any) -> Any:
            if isinstance(value, tuple) and len(value) == len(names):  # members in order
                value = dict(zip(names, value, strict=True))
            if isinstance(value, dict):
                return {n: apply_convert(members.get(n), x) for n, x in value.items()}
            return value

        return struct
    return None  # a dictionary holds no map


def _map_reshaper(kind: pa.MapType) -> Reshape:
    """A map's value (a mapping, or a list of ``(key, value)`` pairs or of entry dicts
    naming the map's key and item fields, as pyarrow takes them) as the list of its
    entries, each a ``{"key": k, "value": v}`` dict; another value as it is."""
    key_name, item_name = kind.key_field.name, kind.item_field.name
    of_key, of_item = _reshaper(kind.key_type), _reshaper(kind.item_type)

    def entry(key: Any, item: Any) -> dict[str, Any]:
        return {"key": apply_convert(of_key, key), "value": apply_convert(of_item, item)}

    def reshape(value: Any) -> Any:
        if isinstance(value, Mapping):
            return [entry(k, v) for k, v in value.items()]
        if isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 1:
            value = list(value)
        if not isinstance(value, list | tuple):
            return value  # no map: refused when the field is built
        entries = []
        for item in value:
            if isinstance(item, tuple) and len(item) == 2:
                entries.append(entry(*item))
            elif isinstance(item, dict) and set(item) <= {key_name, item_name}:
                entries.append(entry(item.get(key_name), item.get(item_name)))
            else:
                return value  # no entry: refused when the field is built
        return entries

    return reshape


def _has_map_or_struct(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind) or pa.types.is_struct(kind):
        return True
    return any(_has_map_or_struct(kind.field(i).type) for i in range(kind.num_fields))


def _shaped(old: pa.DataType, inferred: pa.DataType) -> pa.DataType:
    """``inferred`` (the type of the records' values, reshaped for ``old``) in ``old``'s
    shape: a list of entry structs where ``old`` has a map read back as a map, and a
    list where ``old`` has a large or fixed-size list of that kind (Python's lists
    have no width: pyarrow infers every one as ``list``). Elsewhere ``inferred``; at a
    place whose shape the values did not have, ``old`` (they are refused when the
    field is built): a map's value not reshaped into entries (an item that is no
    entry, so the inferred structs are not exactly ``{key, value}``), and a map's key
    of no type (every key None: Arrow has no map of null keys, and pyarrow's
    ``map_`` raises a ValueError for one)."""
    types = pa.types
    if types.is_map(old):
        if not (types.is_list(inferred) and types.is_struct(inferred.value_type)):
            return old
        entry = inferred.value_type
        if sorted(member.name for member in entry) != ["key", "value"]:
            return old  # not reshaped: some item is no entry of the map
        key = _shaped(old.key_type, entry.field("key").type)
        if pa.types.is_null(key):
            key = old.key_type  # every key None: no key type learned (and none is null)
        return pa.map_(key, _shaped(old.item_type, entry.field("value").type))
    if is_list_type(old) and types.is_list(inferred):
        item = _shaped(old.value_type, inferred.value_type)
        if types.is_fixed_size_list(old):
            return pa.list_(item, old.list_size)
        return pa.large_list(item) if types.is_large_list(old) else pa.list_(item)
    if types.is_struct(old) and types.is_struct(inferred):
        members = []
        for member in inferred:
            at = old.get_field_index(member.name)
            kind = _shaped(old.field(at).type, member.type) if at >= 0 else member.type
            members.append(member.with_type(kind))
        return pa.struct(members)
    return inferred
