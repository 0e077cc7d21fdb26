"""Python values of nested fields, made safe for pyarrow before it converts them.

pyarrow mishandles two kinds of value inside lists and maps, so written
records are prepared here, field by field, before
:func:`~merkle.tablets.fitcolumn.typed_array` converts them:

* A numpy array given as a list value is read from its buffer: datetime64
  and timedelta64 ticks are taken in the field's unit whatever the array's
  own (2020-01-01 as datetime64[s] into timestamp[ms] became 1970-01-19, 1 s
  as timedelta64[s] into duration[us] became 1 us), and its items skip the
  checks a Python list's items get (floats into list<int64> were truncated,
  float64 into list<float32> rounded, bools into list<int8> made 1 and 0,
  bytes into list<string> decoded). An array of a dtype pyarrow converts
  exactly or refuses (the field's own type; an integer into an integer type,
  or into float32 or float64; a float into a float as wide or wider) is kept
  as it is. Any other is fitted as an Arrow column of its dtype is
  (:func:`~merkle.tablets.fitcolumn.fit_column`: all its items at once, units
  converted, a value that does not fit exactly refused), so a value is stored
  exactly or refused, as it would be in a Python list. An object array is the
  list of its Python items.
* A map entry of None is not an exception in pyarrow but an abort of the
  whole process (an Arrow C++ check): it is refused here, naming the field.
* A Python ``set`` given as a list value (or as a map's entries) is taken by
  pyarrow, in its iteration order, without the checks a list gets: a
  fixed-size list cut it to its size or built an invalid array, and its items
  were not checked at all (``{1.5}`` into ``list<int64>`` was stored as
  ``[1]``). It is given as the list of its items, so it is checked as a list
  is, at every depth.

Only types with a list or map inside are walked; the walk rebuilds a value
only where it changed something.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.errors import SchemaError
from merkle.tablets.fitcolumn import fit_column
from merkle.tablets.schema import is_list_type, show_value
from merkle.tablets.typecache import per_type

__all__ = ["prepared_values"]


@dataclass(frozen=True, slots=True)
class _Where:
    """The field and record a value belongs to, for the errors. The record's key is
    asked of ``key_of`` only when an error names it: a caller's ``key_of`` may be
    slow (a DataFrame's reads its key columns), and a valid column needs no key."""

    name: str
    target: pa.DataType
    key_of: Callable[[int], Any]
    position: int

    @property
    def key(self) -> Any:
        """The key of the record the value belongs to."""
        return self.key_of(self.position)


Prepare = Callable[[Any, _Where], Any]


def prepared_values(
    name: str, values: Sequence[Any], target: pa.DataType, key_of: Callable[[int], Any]
) -> Sequence[Any]:
    """``values`` (the Python values of field ``name``, of type ``target``, by record;
    ``key_of(i)`` the key of record ``i``, asked only for an error) with their numpy
    arrays in list places made exact for pyarrow; SchemaError for a value pyarrow
    would store wrongly or crash on. ``values`` itself when nothing changed."""
    prepare = _preparer(target)
    if prepare is None:
        return values
    out: list[Any] | None = None
    for position, value in enumerate(values):
        if value is None:
            continue
        new = prepare(value, _Where(name, target, key_of, position))
        if new is not value:
            if out is None:
                out = list(values)
            out[position] = new
    return values if out is None else out


@per_type
def _preparer(kind: pa.DataType) -> Prepare | None:
    """The preparation of one value of ``kind``; None when it has no list or map inside."""
    if is_list_type(kind):
        return _list_preparer(kind.value_type)
    if pa.types.is_map(kind):
        return _map_preparer(kind)
    if pa.types.is_struct(kind):
        members = [_preparer(kind.field(i).type) for i in range(kind.num_fields)]
        if all(inner is None for inner in members):
            return None
        names = [kind.field(i).name for i in range(kind.num_fields)]
        return _struct_preparer(dict(zip(names, members, strict=True)))
    return None


def _each(values: Sequence[Any], inner: Prepare, where: _Where) -> Any:
    """``values`` with each item prepared: the same object when none changed."""
    new = [None if item is None else inner(item, where) for item in values]
    if all(a is b for a, b in zip(new, values, strict=True)):
        return values
    return new


def _list_preparer(item: pa.DataType) -> Prepare:
    inner = _preparer(item)

    def prepare(value: Any, where: _Where) -> Any:
        if isinstance(value, set):
            value = list(value)  # checked as a list (see the module doc)
        if isinstance(value, np.ndarray):
            value = _array_items(value, item, where)
            if not isinstance(value, list):
                return value  # fitted as a whole: its items are exact
        if inner is None or not isinstance(value, list | tuple):
            return value
        return _each(value, inner, where)

    return prepare


def _struct_preparer(members: Mapping[str, Prepare | None]) -> Prepare:
    """A struct's members (``members``: each one's preparation by name, in order),
    given as a dict or (as pyarrow also takes them) a tuple in the fields' order."""
    order = list(members.values())

    def prepare(value: Any, where: _Where) -> Any:
        if isinstance(value, tuple) and len(value) == len(order):
            new = tuple(
                member if inner is None or member is None else inner(member, where)
                for inner, member in zip(order, value, strict=True)
            )
            return value if all(a is b for a, b in zip(new, value, strict=True)) else new
        if not isinstance(value, dict):
            return value  # pyarrow refuses it
        changed: dict[str, Any] = {}
        for name, member in value.items():
            inner = members.get(name)
            if inner is not None and member is not None:
                new = inner(member, where)
                if new is not member:
                    changed[name] = new
        return {**value, **changed} if changed else value

    return prepare


def _map_preparer(kind: pa.MapType) -> Prepare:
    """A map's entries: None refused (pyarrow aborts on it), keys and values prepared."""
    key_name, item_name = kind.key_field.name, kind.item_field.name
    of_key, of_item = _preparer(kind.key_type), _preparer(kind.item_type)

    def part(inner: Prepare | None, value: Any, where: _Where) -> Any:
        return value if inner is None or value is None else inner(value, where)

    def entry(value: Any, where: _Where) -> Any:
        if value is None:  # (_each skips it: prepare looks for it first)
            raise SchemaError(
                f"field {where.name!r} is {where.target}: the record with key "
                f"{show_value(where.key)} holds a map entry None, which is no (key, value) "
                "pair: drop the entry, or give it as (key, None) for a null value"
            )
        if isinstance(value, tuple) and len(value) == 2:
            key, item = part(of_key, value[0], where), part(of_item, value[1], where)
            return value if key is value[0] and item is value[1] else (key, item)
        if isinstance(value, dict):
            new = dict(value)
            if key_name in value:
                new[key_name] = part(of_key, value[key_name], where)
            if item_name in value:
                new[item_name] = part(of_item, value[item_name], where)
            same = all(new[n] is value[n] for n in value)
            return value if same else new
        return value  # pyarrow refuses it

    def prepare(value: Any, where: _Where) -> Any:
        if isinstance(value, Mapping):
            if of_key is None and of_item is None:
                return value
            pairs = [(k, v) for k, v in value.items()]
            new = _each(pairs, entry, where)
            return value if new is pairs else new
        if isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 1:
            value = list(value)
        if isinstance(value, set):
            value = list(value)  # its entries checked as a list's (see the module doc)
        if not isinstance(value, list | tuple):
            return value  # pyarrow refuses it
        if any(item is None for item in value):
            entry(None, where)  # refused
        if of_key is None and of_item is None:
            return value
        return _each(value, entry, where)

    return prepare


def _array_items(array: np.ndarray[Any, Any], item: pa.DataType, where: _Where) -> Any:
    """A numpy array given where a list of ``item`` goes, as pyarrow converts it exactly:
    the array itself, fitted to ``item``, or (an object array) the list of its items."""
    if array.ndim != 1:
        return array  # pyarrow refuses it
    if array.dtype == object:
        return list(array)
    if _converts_exactly(array.dtype, item):
        return array
    try:
        items = pa.array(array)
    except (pa.ArrowException, TypeError, ValueError):
        return list(array)  # no Arrow type of its own: its items are judged one by one
    # fitted as one list, so that an error shows the list and the ways out of a list
    offsets = pa.array([0, len(items)], pa.int32())
    whole = pa.ListArray.from_arrays(offsets, items)
    try:
        fitted = fit_column(where.name, whole, pa.list_(item), lambda _: where.key).flatten()
    except SchemaError as exc:
        raise SchemaError(f"a numpy {array.dtype} array in field {where.name!r}: {exc}") from None
    kind = fitted.type
    types = pa.types
    if (
        types.is_integer(kind)
        or types.is_floating(kind)
        or types.is_boolean(kind)
        or types.is_timestamp(kind)
        or types.is_duration(kind)
    ) and not (fitted.null_count and not (types.is_timestamp(kind) or types.is_duration(kind))):
        # numpy of the field's own type (NaT for a null time): read exactly by pyarrow
        return fitted.to_numpy(zero_copy_only=False)
    return fitted.to_pylist()


@per_type
def _converts_exactly(dtype: np.dtype[Any], item: pa.DataType) -> bool:
    """Whether pyarrow converts an array of ``dtype`` into ``item`` values exactly or
    refuses it: it checks an integer's range, and whether float32 or float64 holds an
    integer, but reads a uint64 above 2**63 - 1 as negative into a float type, rounds
    an integer into float16, and takes every other dtype from its buffer as it is."""
    try:
        own = pa.from_numpy_dtype(dtype)
    except (pa.ArrowException, NotImplementedError, TypeError, ValueError):
        return False
    if own == item:
        return not pa.types.is_date(own)  # pyarrow fails on datetime64[D] into date32
    types = pa.types
    if types.is_integer(own):
        if types.is_integer(item):
            return True
        return bool(types.is_floating(item) and item.bit_width > 16 and own != pa.uint64())
    if types.is_floating(own):
        return bool(types.is_floating(item) and item.bit_width >= own.bit_width)
    return False
