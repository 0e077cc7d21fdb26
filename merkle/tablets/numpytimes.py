"""numpy ``datetime64`` and ``timedelta64`` scalars in records: their Arrow type, and
their exact value in a field's unit.

pyarrow handles these scalars by their unit, and badly: it types one inside a
list by its unit (``[np.datetime64(t, "s")]`` is ``list<timestamp[s]>``, as a
numpy array of it is), but fails on one of days (``int() argument must be ...
not 'datetime.date'``), takes one only into a field of its own unit
(``datetime64[s]`` into ``timestamp[us]``: "Expected np.datetime64 but got:
timestamp[s]"), and knows no unit but days, s, ms, us and ns. Their
``item()`` is a ``date``, a ``datetime`` or an ``int`` depending on the unit
(a ``datetime64[ns]`` item is its count of nanoseconds), so a type inferred
from it was not the value's.

The rule (doc/api.md, "A value must fit its field"): a numpy time is typed by
its unit, as a numpy array of it is in Arrow data: ``datetime64`` of days
``date32`` (of weeks, months and years too: whole days), of ``s``, ``ms``,
``us`` or ``ns`` a ``timestamp`` of that unit without a zone (of hours and
minutes, ``timestamp[s]``; finer than ns, ``timestamp[ns]``), and
``timedelta64`` a ``duration`` likewise (weeks, days, hours and minutes:
``duration[s]``; months and years have no fixed length and no Arrow type).
Written into a timestamp, date or duration field it is the same instant or
length counted in the field's unit, exactly, or refused as a Python value
with a part finer than the unit is (a timestamp without a zone counts from
the epoch as the numpy value does; one with a zone takes it as UTC, as a
naive ``datetime`` is taken). ``NaT`` is a null.
"""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "NUMPY_TIMES",
    "check_numpy_mix",
    "finest_unit",
    "inferable",
    "is_nat",
    "numpy_time_count",
    "numpy_time_kind",
    "numpy_time_type",
]

#: numpy's own times (a timedelta64 is also a numpy integer).
NUMPY_TIMES = (np.datetime64, np.timedelta64)

#: Attoseconds in one of each numpy unit of fixed length.
_ATTOSECONDS = {
    "W": 604_800 * 10**18,
    "D": 86_400 * 10**18,
    "h": 3_600 * 10**18,
    "m": 60 * 10**18,
    "s": 10**18,
    "ms": 10**15,
    "us": 10**12,
    "ns": 10**9,
    "ps": 10**6,
    "fs": 10**3,
    "as": 1,
}
#: The units of days or more: a ``datetime64`` of one is a date.
_DATE_UNITS = frozenset({"Y", "M", "W", "D"})
#: Arrow's time units, coarsest first.
_ARROW_UNITS = ("s", "ms", "us", "ns")


def is_nat(value: Any) -> bool:
    """Whether ``value`` is a numpy ``NaT`` (a null, of any unit)."""
    return isinstance(value, NUMPY_TIMES) and bool(np.isnat(value))


def numpy_time_kind(value: np.datetime64 | np.timedelta64) -> str:
    """``"date"``, ``"naive datetime"`` or ``"timedelta"``: the kind of Python value a
    numpy time stands for (a ``datetime64`` of days or more is a date)."""
    if isinstance(value, np.timedelta64):
        return "timedelta"
    return "date" if _unit(value) in _DATE_UNITS else "naive datetime"


def numpy_time_type(value: np.datetime64 | np.timedelta64) -> pa.DataType:
    """The Arrow type of a numpy time by its unit (see the module doc); ValueError for a
    ``timedelta64`` of months or years, which no Arrow type holds."""
    unit = _unit(value)
    if isinstance(value, np.datetime64) and unit in _DATE_UNITS:
        return pa.date32()
    if unit not in _ATTOSECONDS:
        raise ValueError(_no_length(unit))
    arrow = _arrow_unit(unit)
    return pa.timestamp(arrow) if isinstance(value, np.datetime64) else pa.duration(arrow)


def finest_unit(units: list[str]) -> str:
    """The finest of Arrow time ``units`` (each of s, ms, us, ns)."""
    return max(units, key=_ARROW_UNITS.index)


def numpy_time_count(value: np.datetime64 | np.timedelta64, target: pa.DataType) -> int | None:
    """``value`` counted in the unit of ``target`` (a timestamp, date or duration type),
    as pyarrow takes a Python int there: days for ``date32``, milliseconds of whole days
    for ``date64``; None for ``NaT``. ValueError saying why when it is not that count
    exactly (a part finer than the unit, a time of day in a date) or not of that kind
    (a ``timedelta64`` in a timestamp or date, a ``datetime64`` in a duration)."""
    if is_nat(value):
        return None
    is_duration = pa.types.is_duration(target)
    if isinstance(value, np.timedelta64) != is_duration:
        held = "a length of time" if is_duration else "a point in time"
        raise ValueError(f"it is a {type(value).__name__}, but a {target} field holds {held}")
    attoseconds = _attoseconds(value)
    if pa.types.is_date(target):
        days, rest = divmod(attoseconds, _ATTOSECONDS["D"])
        if rest:
            raise ValueError("it has a time of day, which a date drops")
        return days * 86_400_000 if pa.types.is_date64(target) else days
    step = _ATTOSECONDS[str(target.unit)]
    count, rest = divmod(attoseconds, step)
    if rest:
        raise ValueError(
            f"it has a fraction of a second finer than the field's unit ({target.unit})"
        )
    return count


def inferable(values: list[Any]) -> list[Any]:
    """``values`` (one field's, by record) with each numpy time inside their lists,
    tuples, sets and dicts in a form pyarrow infers the type of :func:`numpy_time_type`
    from (a date of days or more as ``datetime.date``, hours and minutes as seconds,
    units finer than ns as ns, ``NaT`` as None); ``values`` itself when they hold none.

    pyarrow refuses numpy times of different units at one place ("Cannot mix NumPy
    datetime64 units"), and a naive ``datetime`` or a ``timedelta`` beside one of
    another unit than us. So, as at the top level (doc/api.md), where numpy times meet
    others of another unit or Python ones (us) at one place, every one there is given
    at the finest unit among them: a place is the items of a list (of every record's
    list) or a dict's member of one name, at the same place above. For inference
    only: the values written are fitted as given."""
    units: dict[_Place, set[str]] = {}
    for value in values:
        _collect(value, (), units)
    given = [_given(value, (), units) for value in values]
    return values if all(a is b for a, b in zip(given, values, strict=True)) else given


#: A place in a value: the steps down to it (``_ITEM`` for a list's items, a member's
#: name for a dict's), and the kind of time (numpy's ``M`` or ``m``) found there.
_Place = tuple[tuple[Any, ...], str]
_ITEM = object()


def _time_unit(value: Any) -> tuple[str, str, bool] | None:
    """The kind (``M`` or ``m``), Arrow unit and numpy-ness of a time ``value`` that may
    meet others at one place: a numpy time (not NaT, not a date), a naive ``datetime``
    or a ``timedelta``; None for any other value."""
    if isinstance(value, NUMPY_TIMES):
        unit = _unit(value)
        if is_nat(value) or unit not in _ATTOSECONDS:
            return None
        if isinstance(value, np.datetime64):
            return None if unit in _DATE_UNITS else ("M", _arrow_unit(unit), True)
        return "m", _arrow_unit(unit), True
    if isinstance(value, datetime.datetime):
        return None if value.utcoffset() is not None else ("M", "us", False)
    if isinstance(value, datetime.timedelta):
        return "m", "us", False
    return None


def _collect(value: Any, path: tuple[Any, ...], units: dict[_Place, set[str]]) -> None:
    """Into ``units``, the units of the times at each place of ``value`` (at ``path``)
    where a numpy time is; a Python time's us is marked ``"py"`` until one is."""
    found = _time_unit(value)
    if found is not None:
        kind, unit, is_numpy = found
        held = units.setdefault((path, kind), set())
        held.add(unit if is_numpy else "py")
        return
    if isinstance(value, list | tuple | set):
        for item in value:
            _collect(item, (*path, _ITEM), units)
    elif isinstance(value, dict):
        for name, member in value.items():
            _collect(member, (*path, name), units)


def _given(value: Any, path: tuple[Any, ...], units: dict[_Place, set[str]]) -> Any:
    """``value`` (at ``path``) as :func:`inferable` gives it."""
    if is_nat(value):
        return None
    if isinstance(value, np.datetime64) and _unit(value) in _DATE_UNITS:
        return datetime.date.fromordinal(_EPOCH + _attoseconds(value) // _ATTOSECONDS["D"])
    found = _time_unit(value)
    if found is not None:
        held = units[(path, found[0])]
        numpy_units = [u for u in held if u != "py"]
        if not numpy_units:
            return value  # only Python times here: pyarrow types them itself
        unit = finest_unit(numpy_units + (["us"] if "py" in held else []))
        if not isinstance(value, NUMPY_TIMES):  # a Python time: microseconds
            value = np.datetime64(value) if found[0] == "M" else np.timedelta64(value)
        return value if _unit(value) == unit else value.astype(f"{value.dtype.kind}8[{unit}]")
    if isinstance(value, list | tuple | set):
        items = [_given(item, (*path, _ITEM), units) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        members = {name: _given(member, (*path, name), units) for name, member in value.items()}
        if all(members[name] is member for name, member in value.items()):
            return value
        return members
    return value


def check_numpy_mix(values: list[Any]) -> None:
    """ValueError when ``values`` (with the lists, tuples and dicts inside them) hold a
    numpy ``datetime64`` and another numpy value in one place (the items of a list,
    one member of the dicts): pyarrow's type inference cannot be given them.

    pyarrow 26 infers nested numpy scalars by their dtype, and once it has seen a
    ``datetime64`` (``NaT`` too, or a 0-d array of one) a numpy int, float, bool,
    complex, ``void`` or array after it kills the process (SIGSEGV) instead of
    raising: ``pa.array([[np.datetime64(1, "s")], [np.int64(1)]])``. Such values are
    of different kinds anyway (a point in time and a number), so they are refused
    before pyarrow sees them. Top-level numpy times are typed by
    :func:`numpy_time_type`, never by pyarrow; this guards the values inside.
    """
    seen: dict[tuple[Any, ...], tuple[Any, Any]] = {}  # place -> (a time, another)
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value) for value in values]
    while stack:
        place, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(((*place, name), member) for name, member in value.items())
        elif isinstance(value, list | tuple):
            stack.extend(((*place, None), item) for item in value)
        elif isinstance(value, np.generic | np.ndarray):
            time, other = seen.get(place, (None, None))
            if np.dtype(value.dtype).kind == "M":
                time = value if time is None else time
            else:
                other = value if other is None else other
            seen[place] = (time, other)
            if time is not None and other is not None:
                raise ValueError(
                    f"a numpy datetime64 ({time!r}) and another numpy value "
                    f"({type(other).__name__} {other!r}) in one place cannot be typed "
                    "together: give one kind of value there (convert the numpy values with "
                    ".item(), or give datetime64 values only)"
                )


#: The proleptic Gregorian ordinal of 1970-01-01, numpy's epoch.
_EPOCH = datetime.date(1970, 1, 1).toordinal()


def _unit(value: np.datetime64 | np.timedelta64) -> str:
    return str(np.datetime_data(value.dtype)[0])


def _arrow_unit(unit: str) -> str:
    """The Arrow unit a numpy unit of fixed length is typed with."""
    if unit in _ARROW_UNITS:
        return unit
    return "s" if _ATTOSECONDS[unit] > _ATTOSECONDS["s"] else "ns"


def _attoseconds(value: np.datetime64 | np.timedelta64) -> int:
    """``value`` (not NaT) as a Python int of attoseconds since the epoch (a
    ``datetime64``) or in all (a ``timedelta64``), exactly; ValueError for a
    ``timedelta64`` of months or years."""
    unit, step = np.datetime_data(value.dtype)
    if unit in ("Y", "M") and isinstance(value, np.datetime64):
        # the first day of the month or year: exact in days
        value = value.astype("datetime64[D]")
        unit, step = "D", 1
    if unit not in _ATTOSECONDS:
        raise ValueError(_no_length(unit))
    return int(value.astype(np.int64)) * int(step) * _ATTOSECONDS[str(unit)]


def _no_length(unit: str) -> str:
    """Why a ``timedelta64`` of ``unit`` (months, years, or none) has no Arrow type."""
    if unit == "generic":
        return "a timedelta64 without a unit has no Arrow type: give it a unit (such as 's')"
    return (
        f"a timedelta64 of unit {unit!r} has no fixed length and no Arrow type: give it in "
        "days or a finer unit"
    )
