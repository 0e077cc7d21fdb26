"""The stored form of field types and columns: no dictionaries, views or run-end encoding.

Segments hold every field in its :func:`storage_type`: Arrow has no take, filter
or sort kernel for string and binary views nor for run-end encoding, and every
write, merge and lookup uses them; dictionaries are decoded so that segments
concatenate without unifying them. This module turns types and columns into
that form and knows nothing of schemas or segments, so the segment decoder
(:mod:`merkle.tablets.segment`, which gives segments written before the rule
in it too) and the schema layer (:mod:`merkle.tablets.schema`,
:mod:`merkle.tablets.restore`, which re-export these names) both build on it.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

from merkle.lazy import compute as pc

__all__ = [
    "LIST_ARRAYS",
    "decode_run_ends",
    "fresh_offsets",
    "holds_run_ends",
    "plain_type",
    "served_type",
    "storage_type",
    "stored_column",
]


def storage_type(kind: pa.DataType) -> pa.DataType:
    """The type a field's values have inside segments: ``kind`` without dictionary encoding,
    views or run-end encoding.

    Dictionaries are decoded for storage (rows of one field are concatenated,
    sorted and merged across writes, and one dictionary per segment would
    have to be unified every time); a read casts them back to ``kind``. String
    and binary views and run-end encoded columns are stored plain for another
    reason: Arrow has no take, filter or sort kernel for them, which every
    write, merge and lookup uses. Every other type is stored as it is
    (extension types too: see :func:`plain_type`).
    """
    return _stored(kind, plain=False)


def plain_type(kind: pa.DataType) -> pa.DataType:
    """:func:`storage_type` of ``kind`` with every extension type in it (``pa.uuid()``,
    ``pa.json_()``, a tensor, one the user registered), at any depth, replaced by its
    own storage type.

    pyarrow builds an extension array from Python values only at the top: it has no
    converter for one inside a list, struct or map. Written records are built in this
    type, where every value check applies to the storage values (16 bytes of a
    uuid, the text of a json), and cast to :func:`storage_type` after, which Arrow
    does for storage into extension at every depth without changing a value.
    ``pa.bool8()`` is built as ``bool``, not as its ``int8`` storage: its values
    read as True and False, and what a read gives writes back.
    """
    return _stored(kind, plain=True)


def served_type(kind: pa.DataType) -> pa.DataType:
    """:func:`storage_type` of ``kind`` but for its dictionaries, kept: every string or
    binary view made ``string`` or ``binary`` and every run-end encoding its value type,
    at any depth, the type ``Database.dataset`` serves a field in (Arrow's dataset
    scanner has no filter or take kernel for views or run-end encoding, at any depth,
    and has for dictionaries)."""
    return _stored(kind, plain=False, dictionaries=True)


def _stored(kind: pa.DataType, *, plain: bool, dictionaries: bool = False) -> pa.DataType:
    types = pa.types
    if plain and isinstance(kind, pa.BaseExtensionType):
        if kind.extension_name == "arrow.bool8":
            return pa.bool_()
        return _stored(kind.storage_type, plain=True)
    if types.is_dictionary(kind) and dictionaries:
        return kind  # its values are never views (declarable_type) nor run-end encoded
    if types.is_dictionary(kind) or types.is_run_end_encoded(kind):
        return _stored(kind.value_type, plain=plain, dictionaries=dictionaries)
    if types.is_string_view(kind):
        return pa.string()
    if types.is_binary_view(kind):
        return pa.binary()
    field = functools.partial(_stored_field, plain=plain, dictionaries=dictionaries)
    if types.is_struct(kind):
        return pa.struct([field(kind.field(i)) for i in range(kind.num_fields)])
    if types.is_map(kind):
        return pa.map_(field(kind.key_field), field(kind.item_field), kind.keys_sorted)
    if types.is_large_list(kind):
        return pa.large_list(field(kind.value_field))
    if types.is_fixed_size_list(kind):
        return pa.list_(field(kind.value_field), kind.list_size)
    if types.is_list(kind):
        return pa.list_(field(kind.value_field))
    return kind


def _stored_field(field: pa.Field, *, plain: bool, dictionaries: bool) -> pa.Field:
    return field.with_type(_stored(field.type, plain=plain, dictionaries=dictionaries))


def holds_run_ends(kind: pa.DataType) -> bool:
    """Whether ``kind`` is, or holds at any depth, a run-end encoded type."""
    if pa.types.is_run_end_encoded(kind):
        return True
    return any(holds_run_ends(kind.field(i).type) for i in range(kind.num_fields))


#: The list arrays whose items are rebuilt where no cast reaches them (run-end encoded
#: items: :func:`decode_run_ends`, and ``restore.restore_column`` the other way).
LIST_ARRAYS: dict[int, Any] = {
    pa.list_(pa.int8()).id: pa.ListArray,
    pa.large_list(pa.int8()).id: pa.LargeListArray,
    pa.list_(pa.int8(), 1).id: pa.FixedSizeListArray,
}


def stored_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` in the :func:`storage_type` of its type (itself when it is already).

    A column filtered where Arrow has no kernel for its own type
    (``restore.filtered``), and a view or run-end encoded column of a segment
    written before segments held storage types only (``segment.decode_segment``).
    """
    stored = storage_type(column.type)
    if stored == column.type:
        return column
    return decode_run_ends(column).cast(stored)  # no cast kernel from run-end encoding


def decode_run_ends(column: Any) -> Any:
    """``column`` (an array or chunked array) with every run-end encoding in it decoded,
    at any depth: Arrow casts no run-end encoded type, nor a struct, list or map
    holding one, so a written column is made plain before it is fitted to its field."""
    if not holds_run_ends(column.type):
        return column
    if isinstance(column, pa.ChunkedArray):
        chunks = [decode_run_ends(chunk) for chunk in column.chunks]
        return (
            pa.chunked_array(chunks) if chunks else pa.chunked_array([], storage_type(column.type))
        )
    kind = column.type
    if pa.types.is_run_end_encoded(kind):
        return decode_run_ends(pc.run_end_decode(column))
    mask = column.is_null() if column.null_count else None
    if pa.types.is_struct(kind):
        children = [decode_run_ends(column.field(i)) for i in range(kind.num_fields)]
        names = [kind.field(i).name for i in range(kind.num_fields)]
        return pa.StructArray.from_arrays(children, names=names, mask=mask)
    if pa.types.is_map(kind):
        offsets = fresh_offsets(column.offsets)
        keys, items = decode_run_ends(column.keys), decode_run_ends(column.items)
        plain = pa.map_(keys.type, items.type, kind.keys_sorted)
        return pa.MapArray.from_arrays(offsets, keys, items, type=plain, mask=mask)
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        values = decode_run_ends(column.values.slice(column.offset * size, len(column) * size))
        return pa.FixedSizeListArray.from_arrays(values, size, mask=mask)
    lists = LIST_ARRAYS.get(kind.id)
    if lists is None:
        return column  # a type this does not rebuild (a union): left to the cast to refuse
    values = decode_run_ends(column.values)
    return lists.from_arrays(fresh_offsets(column.offsets), values, mask=mask)


def fresh_offsets(offsets: pa.Array) -> pa.Array:
    """``offsets`` without an array offset: Arrow takes no null mask beside sliced ones."""
    if not offsets.offset:
        return offsets
    return pa.array(offsets.to_numpy(zero_copy_only=False), type=offsets.type)
