"""Whether two versions of a record are equal: what a diff calls an update and a merge a conflict.

Two values are equal when they are stored the same, so that "no change" never
hides a change a read would show: cells are compared column by column in
Arrow where that is exact, and the rest (lists, structs, CBOR cells whose
bytes differ) as decoded values, by type and exact value. The one
documented exception (doc/versions.md) is a map's key order: a dict written
in another order is equal.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import struct
from collections.abc import Callable, Hashable, Mapping

import cbor2
import numpy as np
import pyarrow as pa

from merkle.lazy import compute as pc
from merkle.tablets.evolve import can_widen
from merkle.tablets.keyindex import combine
from merkle.tablets.micros import holds_nanos
from merkle.tablets.segment import column_values, concat_segments, is_cbor_field

__all__ = ["as_bits", "flags", "rows_equal", "same_value"]


def rows_equal(left: pa.Table, right: pa.Table, key_field: str) -> np.ndarray:
    """Per row, whether two row tables of equal length hold equal records.

    A missing column and a null are the same (None is absent); CBOR cells
    whose bytes differ are compared as decoded values by :func:`same_value`
    (a map written in another order is equal; ``Decimal('1.0')`` and
    ``Decimal('1.00')`` are not); floats are compared as their bits, so -0.0
    differs from 0.0 and a NaN equals a NaN of the same bits but not one with
    another payload or sign (which reads back differently).
    """
    n = left.num_rows
    if not n:
        return np.zeros(0, dtype=bool)
    left, right = _under_newer_types(left, right, key_field)
    both = concat_segments([left, right], key_field=key_field)
    a, b = both.slice(0, n), both.slice(n, n)
    equal = np.ones(n, dtype=bool)
    for name in both.column_names:
        if name == key_field:
            continue
        field = both.schema.field(name)
        x, y = combine(a.column(name)), combine(b.column(name))
        null_x = x.is_null().to_numpy(zero_copy_only=False)
        null_y = y.is_null().to_numpy(zero_copy_only=False)
        same = null_x & null_y
        check = ~null_x & ~null_y
        if check.any():
            same |= check & _values_equal(x, y, field, check, name, a, b)
        equal &= same
    return equal


def _under_newer_types(left: pa.Table, right: pa.Table, key: str) -> tuple[pa.Table, pa.Table]:
    """Both row tables with a field one side widened (int32 -> float64, ...) cast to the
    wider type on the other side too: a widening keeps every value, so a record read
    before ``alter_schema(widen=)`` equals it read after (compared as they were, the
    types met as CBOR, ``1`` differed from ``1.0``, a widening alone updated every
    record and a merge against it found spurious row conflicts)."""
    sides = [left, right]
    for name in set(left.column_names) & set(right.column_names) - {key}:
        types = [side.schema.field(name).type for side in sides]
        for narrow, wide in ((0, 1), (1, 0)):
            if types[0] != types[1] and can_widen(types[narrow], types[wide]):
                side = sides[narrow]
                field = side.schema.field(name).with_type(types[wide])
                with contextlib.suppress(pa.ArrowNotImplementedError, pa.ArrowInvalid):
                    column = side.column(name).cast(types[wide])
                    sides[narrow] = side.set_column(
                        side.schema.get_field_index(name), field, column
                    )
                break
    return sides[0], sides[1]


def _values_equal(
    x: pa.Array,
    y: pa.Array,
    field: pa.Field,
    check: np.ndarray,
    name: str,
    a: pa.Table,
    b: pa.Table,
) -> np.ndarray:
    """Where both cells are non-null: whether they are equal."""
    out = np.zeros(len(x), dtype=bool)
    bits = _bits_type(field.type)
    try:
        # Floats (nested ones too) as bits, so that -0.0 differs from 0.0 (a change a
        # merge must carry), and a NaN from a NaN with another payload: what the commit
        # calls a change (merkle.db.noop compares bits), since it reads back differently.
        out = flags(pc.equal(x.view(bits), y.view(bits)) if bits != x.type else pc.equal(x, y))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, TypeError):
        pass
    else:
        if not is_cbor_field(field):
            return out
    # Decoded comparison where the fast path could not decide (lists, structs, unions,
    # CBOR bytes that differ: equal bytes are equal values).
    todo = np.flatnonzero(check & ~out)
    if len(todo):
        take = pa.array(todo, type=pa.int64())
        left = _decoded(a.select([name]).take(take), name, field)
        right = _decoded(b.select([name]).take(take), name, field)
        for i, p, q in zip(todo, left, right, strict=True):
            out[i] = same_value(p, q)
    return out


def _decoded(table: pa.Table, name: str, field: pa.Field) -> list[object]:
    """The values of column ``name`` as Python, for :func:`same_value`.

    A typed column is read with its floats as their bits and its nanosecond times
    as their ticks (:func:`_exact_type`), at any depth. Times with nanoseconds
    (inside a list, struct or map: a flat one is decided by the fast path) have no
    Python form, and reading them as records is refused
    (:func:`~merkle.tablets.micros.in_micros`), which made a diff or merge of a
    change there fail. A float16 or float32 becomes a Python float by a conversion
    that makes a signalling NaN quiet, so two NaNs whose stored bits differ could
    read as one value: a change the commit counts (it compares bits) and the diff
    did not.
    """
    exact = _exact_type(field.type)
    if is_cbor_field(field) or exact == field.type:
        return column_values(table, name)
    try:
        column = table.column(name)
        values: list[object] = pa.chunked_array(
            [c.view(exact) for c in column.chunks], exact
        ).to_pylist()
        return values
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, TypeError):
        return column_values(table, name)  # a layout not rebuilt here: as before


def _exact_type(t: pa.DataType) -> pa.DataType:
    """``t`` with each float type replaced by the integer of its width (its bits) and each
    nanosecond time type by int64 (its ticks), at any depth: integers that compare
    exactly where the Python values would not."""

    def leaf(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_floating(kind):
            return _FLOAT_BITS[kind.bit_width]
        return pa.int64() if holds_nanos(kind) and not kind.num_fields else kind

    return _leaves_mapped(t, leaf)


def _leaves_mapped(t: pa.DataType, leaf: Callable[[pa.DataType], pa.DataType]) -> pa.DataType:
    """``t`` with each type that holds no other type replaced by ``leaf`` of it, at any
    depth: inside every list layout (a fixed-size list becomes a list of that size),
    maps, structs, unions, dictionaries, run-end encodings and extension types (whose
    storage is mapped: ``t`` itself when nothing in it changes).

    A layout this left out was compared as it was: Arrow compares its floats as
    numbers, so a commit writing -0.0 over 0.0 inside a list view, a union or an
    extension type was "no change" and the write was lost.
    """
    types = pa.types
    if isinstance(t, pa.BaseExtensionType):
        storage = _leaves_mapped(t.storage_type, leaf)
        return t if storage == t.storage_type else storage
    if types.is_map(t):
        key = t.key_field.with_type(_leaves_mapped(t.key_type, leaf))
        item = t.item_field.with_type(_leaves_mapped(t.item_type, leaf))
        return pa.map_(key, item, t.keys_sorted)
    if types.is_fixed_size_list(t):
        value = t.value_field.with_type(_leaves_mapped(t.value_type, leaf))
        return pa.list_(value, t.list_size)
    for test, make in _LIST_LAYOUTS:
        if test(t):
            return make(t.value_field.with_type(_leaves_mapped(t.value_type, leaf)))
    if types.is_struct(t):
        return pa.struct([field.with_type(_leaves_mapped(field.type, leaf)) for field in t])
    if types.is_union(t):
        fields = [field.with_type(_leaves_mapped(field.type, leaf)) for field in t]
        return pa.union(fields, t.mode, list(t.type_codes))
    if types.is_dictionary(t):
        return pa.dictionary(t.index_type, _leaves_mapped(t.value_type, leaf), t.ordered)
    if types.is_run_end_encoded(t):
        return pa.run_end_encoded(t.run_end_type, _leaves_mapped(t.value_type, leaf))
    return leaf(t)


_ListLayout = tuple[Callable[[pa.DataType], bool], Callable[[pa.Field], pa.DataType]]
_LIST_LAYOUTS: tuple[_ListLayout, ...] = (
    (pa.types.is_list, pa.list_),
    (pa.types.is_large_list, pa.large_list),
    (pa.types.is_list_view, pa.list_view),
    (pa.types.is_large_list_view, pa.large_list_view),
)


_FLOAT_BITS = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def as_bits(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` with every floating-point value (nested ones too) viewed as the
    integer of its width, so that comparing it compares stored bits: Arrow
    compares floats as numbers (-0.0 equals 0.0, NaN equals no NaN)."""
    bits = _bits_type(column.type)
    if bits == column.type:
        return column
    return pa.chunked_array([chunk.view(bits) for chunk in column.chunks], bits)


def _bits_type(t: pa.DataType) -> pa.DataType:
    """``t`` with each floating-point type replaced by the integer type of its width."""
    return _leaves_mapped(
        t, lambda leaf: _FLOAT_BITS[leaf.bit_width] if pa.types.is_floating(leaf) else leaf
    )


def flags(array: pa.Array) -> np.ndarray:
    """A boolean Arrow array as a numpy mask, null as False."""
    mask: np.ndarray = array.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    return mask


# -- decoded values ------------------------------------------------------------------


def same_value(p: object, q: object) -> bool:
    """Whether two decoded values are stored the same: same type and exact value at any depth.

    Python's ``==`` is too loose for "no change": ``Decimal('1.0') == Decimal('1.00')``,
    an aware datetime equals the same instant at another UTC offset, ``-0.0 == 0.0``,
    ``1 == True`` as a dict key; each of those pairs reads back differently, so
    comparing with ``==`` made such a write no change to a diff and a merge of it
    silently kept the old value. And ``==`` says NaN differs from NaN, which made
    an unchanged NaN a change. So floats compare as bits (a NaN equals a NaN of the
    same bits; one with another payload or sign reads back differently, and the
    commit, which compares stored bits, makes a version for it: calling it equal
    here gave that version an empty diff),
    Decimals by sign, digits and exponent, datetimes by wall time and UTC offset,
    containers item by item with these rules. A dict's key order is the one
    difference that is not a change (doc/versions.md).
    """
    if type(p) is not type(q):
        return False
    if isinstance(p, list | tuple):
        assert isinstance(q, list | tuple)
        return len(p) == len(q) and all(same_value(a, b) for a, b in zip(p, q, strict=True))
    if isinstance(p, Mapping):
        assert isinstance(q, Mapping)
        return _same_maps(p, q)
    if isinstance(p, cbor2.CBORTag):
        assert isinstance(q, cbor2.CBORTag)
        return p.tag == q.tag and same_value(p.value, q.value)
    return _token(p) == _token(q)


def _same_maps(p: Mapping[object, object], q: Mapping[object, object]) -> bool:
    """Same keys (exactly, as :func:`_token` tells them) with the same values, in any order."""
    if len(p) != len(q):
        return False
    theirs = {_token(k): v for k, v in q.items()}
    mine = {_token(k): v for k, v in p.items()}
    if len(theirs) != len(q) or len(mine) != len(p):
        # Keys only Python tells apart (two NaN keys of the same bits): compare in order.
        return all(same_value(a, b) for a, b in zip(p.items(), q.items(), strict=True))
    return mine.keys() == theirs.keys() and all(same_value(v, theirs[k]) for k, v in mine.items())


def _token(v: object) -> Hashable:
    """A hashable stand-in for ``v``: equal exactly when the values are stored the same.

    Used for dict keys and set members, which must match exactly too (``{1: x}``
    and ``{True: x}`` are not the same map), and for scalars.
    """
    kind = type(v)
    if isinstance(v, float):
        return (kind, struct.pack("<d", v))  # the bits: -0.0 and each NaN payload apart
    if isinstance(v, decimal.Decimal):
        return (kind, v.as_tuple())
    if isinstance(v, datetime.datetime):
        return (kind, v.replace(tzinfo=None), v.utcoffset())
    if isinstance(v, list | tuple):
        return (kind, tuple(_token(x) for x in v))
    if isinstance(v, Mapping):
        return (kind, frozenset((_token(k), _token(x)) for k, x in v.items()))
    if isinstance(v, set | frozenset):
        return (kind, frozenset(_token(x) for x in v))
    if isinstance(v, cbor2.CBORTag):
        return (kind, v.tag, _token(v.value))
    return (kind, v)
