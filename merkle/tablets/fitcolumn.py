"""One column fitted to a field's type exactly, or a SchemaError naming the value.

:func:`fit_column` takes an Arrow column: a cast to the field's type is
accepted only when casting back gives the same values (an int64 column fits
an int32 field when every value is in range; 1.5 never fits an int field)
and Arrow's checked cast agrees (a decimal beyond the field's precision, or
-1 into uint64, survives the unchecked round trip but is no fit). The rows
are compared by Arrow kernels (:mod:`merkle.tablets.fitexact`), which also hold
a decimal and a float to being the same number: ``Decimal("0.1")`` comes back
from float32 as 0.1, but float32 holds only 0.10000000149.... A timestamp column
fits a date field when every value is a midnight, as a ``datetime`` does; a
column holding a list view (or into one) is converted value by value, as Arrow
casts no list into a view and a view into a list wrongly.
:func:`typed_array` takes Python values (records, or a column no cast kernel
converts exactly) and checks each with :func:`~merkle.tablets.fits.loss_check`,
since pyarrow would cut or round some without a word; a ``Decimal`` in a float
place, or a float in a decimal place, which pyarrow refuses, it takes as the
same number of the other kind when there is one, as :func:`fit_column` does
(:func:`~merkle.tablets.fits.exact_numbers`). Both are what
:mod:`merkle.tablets.conform` checks written rows with; they live here to keep
that module to its rows-in, rows-out logic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.errors import SchemaError
from merkle.lazy import compute as pc
from merkle.tablets.dicts import decoded_values
from merkle.tablets.fitexact import misfit_rows, needs_exactness_check, row_text
from merkle.tablets.fits import Convert, exact_numbers, loss_check
from merkle.tablets.pylimits import failing_kind, python_limit
from merkle.tablets.restore import decode_run_ends, holds_run_ends
from merkle.tablets.schema import show_value, type_family

__all__ = ["fit_column", "typed_array"]


def fit_column(
    name: str,
    column: pa.Array | pa.ChunkedArray,
    target: pa.DataType,
    key_of: Callable[[int], Any],
    *,
    key_field: bool = False,
) -> pa.Array | pa.ChunkedArray:
    """``column`` as ``target`` when every value converts exactly; SchemaError otherwise.

    ``key_field``: ``column`` holds the keys themselves, so an error names the row
    (``key_of`` is not asked) and gives the ways out a key field has: it cannot be
    declared schema-free, and widens only within its key codec.
    """
    source = column.type
    if source == target:
        return column
    if pa.types.is_dictionary(source):
        column = decoded_values(column)  # no cast kernel for some (string_view: Polars)
        source = column.type
        if source == target:
            return column
    if holds_run_ends(source):
        column = decode_run_ends(column)  # no cast kernel from run-end encoding, at any depth
        source = column.type
        if source == target:
            return column
    if pa.types.is_null(source):
        return pa.nulls(len(column), target)
    place = _Place(name, target, key_of, key_field)
    if pa.types.is_timestamp(source) and pa.types.is_date(target):
        return _timestamps_as_dates(column, target, place)
    if _family_mismatch(source, target):
        position = _first_valid(column)
        raise SchemaError(
            f"{place.what} {name!r} is {target}, but the data holds {source}"
            + _where(column, position, place)
            + f": {place.other_kind()}"
        )
    if _holds_list_view(source) or _holds_list_view(target):
        # Arrow casts no list into a list view (nor a view into another), and a list view
        # into a list it casts to an invalid array: each value is converted as a record's is
        return typed_array(name, _python_values(column, place), target, key_of, key_field=key_field)
    try:
        candidate = column.cast(target, safe=False)
        back = candidate.cast(source, safe=False)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        # No exact cast kernel (int64 -> decimal128(10, 2), ...), or struct members Arrow
        # cannot match (a NOT NULL member, as Spark's named_struct marks every member, that
        # the other side lacks): convert value by value, which names the member at fault.
        values = _python_values(column, place)
        return typed_array(name, values, target, key_of, key_field=key_field)
    try:
        _checked_cast(column, target)
        checked = True
    except pa.ArrowNotImplementedError:
        checked = True  # no checked kernel: the round trip below is the check
    except pa.ArrowInvalid:
        checked = False  # refused below, by the round trip or else by Arrow's reason
    if back.equals(column) and not needs_exactness_check(source, target):
        if not checked:
            _refuse_unchecked(column, target, place)
        return candidate
    misfits = misfit_rows(column, candidate, back)
    if misfits.any():
        position = int(np.argmax(misfits))
        value = row_text(column, position)
        lost = loss_check(target)
        reason = None if lost is None or value is None else lost(value)
        if reason:  # a struct member the field lacks, say: as typed_array names it
            raise place.misfit(value, position, reason)
        raise SchemaError(
            f"{place.what} {name!r} is {target}: the value {show_value(value)} of "
            f"{place.record(position)} does not fit it exactly (it would become "
            f"{show_value(row_text(candidate, position))}): {place.way_out()}"
        )
    if not checked:
        _refuse_unchecked(column, target, place)
    return candidate


def _timestamps_as_dates(
    column: pa.Array | pa.ChunkedArray, target: pa.DataType, place: _Place
) -> pa.Array | pa.ChunkedArray:
    """A timestamp ``column`` as ``target``, a date type, when every value is a midnight;
    SchemaError naming the first value with a time of day, which a date would drop (as a
    record's ``datetime`` is refused: :func:`~merkle.tablets.fits.loss_check`).

    A timestamp with a zone is taken at its wall time in that zone, as an aware
    ``datetime`` is (2024-04-30 22:00 UTC in a ``Europe/Paris`` column is 2024-05-01,
    a midnight there). Arrow's cast to a date drops a time of day without a word, even
    checked, so the days are cast back and compared with the wall times.
    """
    try:
        wall = pc.local_timestamp(column) if column.type.tz else column
        days = wall.cast(pa.date32())
        moved = pc.fill_null(pc.not_equal(days.cast(wall.type), wall), False)
    except pa.ArrowInvalid as exc:  # a wall time past a timestamp's range
        position = _first_valid(column) or 0
        raise place.misfit(row_text(column, position), position, exc) from None
    if pc.any(moved).as_py():
        position = int(pc.index(moved, True).as_py())
        ticks = wall.slice(position, 1).cast(pa.int64())[0].as_py()
        if ticks % _TICKS_PER_DAY[wall.type.unit]:
            reason = "it has a time of day, which a date drops"
        else:  # a midnight whose day count wraps around in date32
            reason = f"its day is outside the range of {target}"
        raise place.misfit(row_text(column, position), position, reason)
    return days.cast(target)


#: A day in each timestamp unit.
#: What pyarrow raises for Python values that do not convert to a type. SystemError too:
#: pyarrow 26 raises it (an error left set while building its message) for a 0-d numpy
#: array among the values of a struct (``pa.array([np.array(1), 1], type=struct)``).
_REFUSALS = (pa.ArrowException, TypeError, ValueError, OverflowError, SystemError)
_TICKS_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def _holds_list_view(kind: pa.DataType) -> bool:
    """Whether ``kind`` is, or holds at any depth, a ``list_view`` or ``large_list_view``."""
    if pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind):
        return True
    if pa.types.is_dictionary(kind):
        return _holds_list_view(kind.value_type)
    if isinstance(kind, pa.BaseExtensionType):
        return _holds_list_view(kind.storage_type)
    return any(_holds_list_view(kind.field(i).type) for i in range(kind.num_fields))


def _python_values(column: pa.Array | pa.ChunkedArray, place: _Place) -> list[Any]:
    """``column`` as Python values, for a check value by value; SchemaError naming the
    first value Python has no form for (a timestamp beyond year 9999, a duration beyond
    a timedelta's days) and the limit of its kind, found by halving the rows rather
    than converting them one by one."""
    unconvertible = (OverflowError, ValueError, pa.ArrowException)
    try:
        values: list[Any] = column.to_pylist()
        return values
    except unconvertible:
        pass
    low, high = 0, len(column)
    while high - low > 1:
        middle = (low + high) // 2
        try:
            column.slice(low, middle - low).to_pylist()
        except unconvertible:
            high = middle
        else:
            low = middle
    one = column.slice(low, 1)
    kind = failing_kind(one.combine_chunks() if isinstance(one, pa.ChunkedArray) else one)
    limit = python_limit(kind) if kind is not None else None
    raise SchemaError(
        f"{place.what} {place.name!r} is {place.target}: the value "
        f"{show_value(row_text(column, low))} of {place.record(low)} has no Python form "
        f"({limit or 'Python cannot hold it'}), and no cast converts it to the field's type "
        f"to check it exactly: {place.way_out()}"
    )


def _family_mismatch(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a value of ``source`` differs in kind from ``target``'s, at the top or
    anywhere inside (a list of bools is no list of ints: Arrow casts True to 1, and 1
    casts back to True, so the round trip alone takes it)."""
    if pa.types.is_null(source):
        return False  # nulls fit anything
    if type_family(source) != type_family(target):
        return True
    if pa.types.is_dictionary(source):
        source = source.value_type
    if pa.types.is_dictionary(target):
        target = target.value_type
    if pa.types.is_map(source) and pa.types.is_map(target):
        return _family_mismatch(source.key_type, target.key_type) or _family_mismatch(
            source.item_type, target.item_type
        )
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        wanted = {target.field(i).name: target.field(i).type for i in range(target.num_fields)}
        return any(
            _family_mismatch(source.field(i).type, wanted[source.field(i).name])
            for i in range(source.num_fields)
            if source.field(i).name in wanted
        )
    if type_family(source) == "list":
        return _family_mismatch(source.value_type, target.value_type)
    return False


@dataclass(frozen=True)
class _Place:
    """How :func:`fit_column`'s errors name the field, a value's place, and the way out."""

    name: str
    target: pa.DataType
    key_of: Callable[[int], Any]
    key_field: bool

    @property
    def what(self) -> str:
        return "key field" if self.key_field else "field"

    def record(self, position: int) -> str:
        if self.key_field:
            return f"row {position}"
        return f"the record with key {show_value(self.key_of(position))}"

    def short(self, position: int) -> str:
        if self.key_field:
            return f"row {position}"
        return f"key {show_value(self.key_of(position))}"

    def other_kind(self) -> str:
        if self.key_field:
            return (
                f"convert the key values to {self.target} (a key field's type cannot change "
                "kind, and it cannot be declared schema-free)"
            )
        return (
            "convert the data, or change the field (alter_schema) or declare it "
            f"schema-free (alter_schema(table, free=[{self.name!r}]))"
        )

    def misfit(self, value: Any, position: int, reason: object) -> SchemaError:
        """The error for ``value`` (of the row at ``position``), which ``reason`` says
        the field cannot hold."""
        return SchemaError(
            f"{self.what} {self.name!r} is {self.target}: the value {show_value(value)} "
            f"({type(value).__name__}) of {self.record(position)} "
            f"does not fit it ({reason}): {self.way_out()}"
        )

    def way_out(self) -> str:
        if self.key_field:
            return (
                "fix the value, or widen the key field within its key codec "
                f"(alter_schema(table, widen={{{self.name!r}: ...}})); a key field cannot "
                "be declared schema-free"
            )
        return _way_out(self.name, self.target)


def _checked_cast(column: pa.Array | pa.ChunkedArray, target: pa.DataType) -> None:
    """Cast ``column`` to ``target`` with Arrow's checks: ArrowInvalid naming a loss.

    An unsafe cast and back is not proof enough: it can wrap a value and unwrap it
    again (-1 into uint64 and back; a decimal beyond the field's precision keeps its
    digits, 123456789012.5 into decimal(10, 2)), so a value the field cannot hold
    would be stored and make the table unreadable. Arrow's checks catch those. Its
    float check alone is left out: it refuses an integer beyond 2**53 that a double
    holds exactly, and the round trip already catches a float that loses.
    """
    pc.cast(column, options=pc.CastOptions(target, allow_float_truncate=True))


def _refuse_unchecked(
    column: pa.Array | pa.ChunkedArray, target: pa.DataType, place: _Place
) -> None:
    """SchemaError naming the first value of ``column`` Arrow's checked cast refuses."""
    low, high = 0, len(column)
    reason = ""
    while high - low > 1:  # halve the rows holding the first refused value
        middle = (low + high) // 2
        try:
            _checked_cast(column.slice(low, middle - low), target)
        except pa.ArrowInvalid as exc:
            high, reason = middle, str(exc)
        else:
            low = middle
    try:
        _checked_cast(column.slice(low, 1), target)
    except pa.ArrowInvalid as exc:
        reason = str(exc)
    value = row_text(column, low)
    raise SchemaError(
        f"{place.what} {place.name!r} is {target}: the value {show_value(value)} of "
        f"{place.record(low)} does not fit it ({reason}): {place.way_out()}"
    )


def _way_out(name: str, target: pa.DataType) -> str:
    """What to do about a value a field cannot hold: a nested field cannot be widened."""
    free = f"alter_schema(table, free=[{name!r}]); CLI: merkle table alter DB T --free {name}"
    if pa.types.is_nested(target):
        return f"declare the field schema-free ({free}), or fix the value"
    return (
        f"widen the field (alter_schema(table, widen={{{name!r}: ...}})), declare it "
        f"schema-free ({free}), or fix the value"
    )


def _first_valid(column: pa.Array | pa.ChunkedArray) -> int | None:
    valid = pc.is_valid(column)
    index = pc.index(valid, True).as_py()
    return None if index is None or index < 0 else int(index)


def _where(column: Any, position: int | None, place: _Place) -> str:
    if position is None:
        return ""
    value = row_text(column, position)
    return f" (first: {show_value(value)}, {place.short(position)})"


def typed_array(
    name: str,
    values: Sequence[Any],
    target: pa.DataType,
    key_of: Callable[[int], Any],
    *,
    key_field: bool = False,
) -> pa.Array:
    """Python values as an array of ``target``; SchemaError naming the first that does not fit
    (``key_field``: the values are the keys themselves, as in :func:`fit_column`)."""
    lost = loss_check(target)

    def whole(candidates: Sequence[Any]) -> pa.Array | None:
        """``candidates`` as one array when every value fits exactly, else None."""
        try:
            array = pa.array(candidates, type=target)
            if lost is None or not any(lost(v) for v in candidates if v is not None):
                return array
        except _REFUSALS:
            pass
        return None

    array = whole(values)
    if array is not None:
        return array
    given = values
    convert = exact_numbers(target)
    if convert is not None:
        # pyarrow refuses a Decimal in a float place and a float in a decimal place: each
        # is taken as the other kind's same number, or refused (as an Arrow column is).
        given = _exact_numbers(values, convert, _Place(name, target, key_of, key_field))
        array = whole(given)
        if array is not None:
            return array
    for position, value in enumerate(given):
        if value is None:
            continue
        try:
            reason = None if lost is None else lost(value)
            if reason:
                raise ValueError(reason)  # pyarrow would cut or round it without a word
            pa.array([value], type=target)
        except _REFUSALS as exc:
            place = _Place(name, target, key_of, key_field)
            raise place.misfit(values[position], position, exc) from None
    raise SchemaError(f"field {name!r} is {target}: its values do not fit it")


def _exact_numbers(values: Sequence[Any], convert: Convert, place: _Place) -> list[Any]:
    """``values`` through ``convert`` (:func:`~merkle.tablets.fits.exact_numbers`);
    SchemaError naming the first value that is not the same number in the field's type."""
    out: list[Any] = []
    for position, value in enumerate(values):
        try:
            out.append(None if value is None else convert(value))
        except ValueError as exc:
            raise place.misfit(value, position, exc) from None
    return out
