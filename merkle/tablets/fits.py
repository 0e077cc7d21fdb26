"""Whether a Python value fits an Arrow type exactly.

pyarrow converts some Python values into a type with a loss and no word: a
float (Python's or numpy's) into an integer type is truncated, as is any other
object it takes through ``int()`` (a Fraction; a UUID becomes its number), a
datetime into a date loses its time of day, a fraction of a second below a
timestamp's, time's or duration's unit is cut (and a number there, which counts
the unit, is truncated through ``int()`` as into an integer type), a float into
float32 or float16 (or an int into float16) is rounded, and a bool into a float
type becomes 1.0 or 0.0. A value that does not fit its field is a SchemaError
(doc/api.md, "Schemas"), as the same value given as Arrow data already was (a cast that does not
round-trip, or a bool column into a number field). Values are checked
inside lists, structs and maps (keys and values) alike; a map entry of None is
refused too (pyarrow aborts the process on it). A numpy array given as a list
is fitted as a whole before (:mod:`merkle.tablets.nestedvalues`).

pyarrow also changes a value's kind without a word where text meets bytes: it
decodes ``bytes`` (and ``bytearray``, ``memoryview``) written into a string
type (or ``pa.json_()``) as UTF-8, and encodes a ``str`` written into a binary
type (or ``pa.uuid()``: 16 characters became its 16 bytes). A string
field holds ``str`` and a binary field ``bytes``, on every path (doc/api.md,
"Schemas"): an Arrow binary column is no string column, and a Python value
is held to the same rule. :func:`kind_misfit` finds the first value of the
other kind in a column of Python values (a type test per distinct Python
type, not a call per value); :func:`loss_check` applies the same rule to
values inside lists, structs and maps.

pyarrow takes any sequence as a list, ``str`` and ``bytes`` too: it would split
``"blue"`` into its characters and ``b"\\x01\\xff"`` into its byte values without a
word. A list field refuses both (and ``bytearray``, ``memoryview``), at the top
and inside nested values alike.

pyarrow refuses a ``Decimal`` in a float place and a float in a decimal place
outright, though an Arrow decimal column fits a float field (and a float
column a decimal field) when the values are the same number (doc/api.md, "A
value must fit its field"). :func:`exact_numbers` converts such values for
records the same way: exactly, or not at all (``Decimal("0.5")`` becomes 0.5,
``Decimal("0.1")`` is refused; 2.5 becomes ``Decimal("2.5")`` in a decimal(5, 1)
field, 0.1 is refused).
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import math
import numbers
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, SupportsInt, cast

import numpy as np
import pyarrow as pa

from merkle.tablets.numpytimes import NUMPY_TIMES, numpy_time_count

__all__ = [
    "apply_convert",
    "exact_numbers",
    "is_list_like",
    "kind_misfit",
    "loss_check",
    "over_items",
    "text_kind",
]

Check = Callable[[Any], str | None]
Convert = Callable[[Any], Any]

#: The Python types of raw bytes: pyarrow decodes each as UTF-8 into a string type.
_BYTES = (bytes, bytearray, memoryview)


def text_kind(target: pa.DataType) -> str | None:
    """``"string"`` or ``"binary"`` for the types that hold text or bytes (large, view,
    fixed-size and dictionary-encoded ones included), else None.

    An extension type is of its storage's kind: a ``pa.uuid()`` holds 16 bytes (or a
    ``uuid.UUID``), never text; a ``pa.json_()`` holds text, never bytes.
    """
    while pa.types.is_dictionary(target) or isinstance(target, pa.BaseExtensionType):
        target = target.value_type if pa.types.is_dictionary(target) else target.storage_type
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        return "string"
    if (
        pa.types.is_binary(target)
        or pa.types.is_large_binary(target)
        or pa.types.is_fixed_size_binary(target)
    ):
        return "binary"
    return {"string_view": "string", "binary_view": "binary"}.get(str(target))


def _other_kind(target: pa.DataType) -> tuple[type, ...] | None:
    """The Python types a field of ``target`` refuses though pyarrow would convert them."""
    kind = text_kind(target)
    if kind == "string":
        return _BYTES
    if kind == "binary":
        return (str,)
    return None


def _kind_reason(value: Any, target: pa.DataType) -> str:
    if text_kind(target) == "string":
        return (
            f"it is {type(value).__name__}, not str: a string field holds text, and bytes "
            "are never decoded into it"
        )
    return (
        f"it is {type(value).__name__}, not bytes: a binary field holds bytes, and text "
        "is never encoded into it"
    )


def kind_misfit(values: Sequence[Any], target: pa.DataType) -> int | None:
    """The position of the first of ``values`` (Python values for a field of ``target``)
    that is text for a binary type or bytes for a string type; None if there is none.

    Costs one pass of ``type`` over the values and a test per distinct type; the
    values are walked again only when one is of the other kind.
    """
    other = _other_kind(target)
    if other is None:
        return None
    if not any(issubclass(kind, other) for kind in set(map(type, values))):
        return None
    return next(i for i, value in enumerate(values) if isinstance(value, other))


def _kind_check(target: pa.DataType) -> Check | None:
    other = _other_kind(target)
    if other is None:
        return None
    return lambda v: _kind_reason(v, target) if isinstance(v, other) else None


def _member_check(target: pa.DataType) -> Check | None:
    """The check of a value inside a list, struct or map: its losses, and its kind."""
    return loss_check(target) or _kind_check(target)


def loss_check(target: pa.DataType) -> Check | None:
    """For a type pyarrow converts some Python values into with a loss (cutting or
    rounding them without a word), a function naming the loss of one value (None when
    it fits exactly); None for other types. Nested types are checked inside: a struct
    (or a map's entry) also loses a member its fields do not name, which pyarrow drops
    without a word. Inside them, text and bytes are held to their kind as well; a
    top-level column of them is checked by :func:`kind_misfit`, all at once."""
    if pa.types.is_struct(target):
        return _struct_check(target)
    if pa.types.is_map(target):
        return _map_check(target)
    if is_list_like(target):
        return _items_check(_member_check(target.value_type))
    if pa.types.is_integer(target):
        return _integer_loss
    if pa.types.is_floating(target):
        return _FLOAT_CHECKS[target.bit_width]
    if _is_temporal(target):
        return _temporal_check(target)
    return None


def _is_temporal(target: pa.DataType) -> bool:
    """Whether ``target`` is a timestamp, time, date or duration type (Arrow's temporal
    types but its intervals, which count no one unit)."""
    return bool(pa.types.is_temporal(target) and not pa.types.is_interval(target))


#: Milliseconds in a day: every ``date64`` value is a multiple of it.
_DAY_MS = 86_400_000


def _temporal_check(target: pa.DataType) -> Check:
    """The loss of a value stored in a timestamp, time, date or duration type.

    pyarrow takes a number there as a count of the type's unit, through ``int()``:
    1.5 into duration[s] became 1 s, -0.5 became 0, 1.5 into date32 the day after the
    epoch. A number is held to the rule of an integer field (:func:`_integer_loss`): a
    whole number is that many units, anything else is refused. A ``datetime``, ``time``
    or ``timedelta`` loses a fraction of a second finer than the unit, and a datetime
    its time of day in a date.
    """
    unit = {"date32[day]": "day", "date64[ms]": "ms"}.get(str(target)) or str(target.unit)
    step = {"s": 1_000_000, "ms": 1_000}.get(unit)
    is_date, is_duration = pa.types.is_date(target), pa.types.is_duration(target)

    def check(value: Any) -> str | None:
        if isinstance(value, _NUMBERS) and not isinstance(value, NUMPY_TIMES):
            lost = _integer_loss(value)
            if not lost and unit == "ms" and is_date and int(cast(SupportsInt, value)) % _DAY_MS:
                lost = "it is not a whole number of days"  # date64 counts days in ms
            return (
                f"{lost}: a number in a {target} field counts its unit ({unit})" if lost else None
            )
        if is_date:
            if isinstance(value, datetime.datetime) and value.time() != datetime.time():
                return "it has a time of day, which a date drops"
            return None
        if step is None:
            return None
        if is_duration:
            cut = isinstance(value, datetime.timedelta) and value.microseconds % step
        else:
            cut = isinstance(value, datetime.datetime | datetime.time) and value.microsecond % step
        return (
            f"it has a fraction of a second finer than the field's unit ({unit})" if cut else None
        )

    return check


#: The values a temporal field takes as a count of its unit (pyarrow calls ``int()``);
#: numpy's times among them (a timedelta64 is a numpy integer) are not counts.
_NUMBERS = (numbers.Number, np.bool_, uuid.UUID)


def _struct_check(target: pa.StructType) -> Check:
    children = {
        target.field(i).name: _member_check(target.field(i).type) for i in range(target.num_fields)
    }

    required = [
        target.field(i).name for i in range(target.num_fields) if not target.field(i).nullable
    ]

    def check(value: Any) -> str | None:
        if not isinstance(value, dict):
            return None  # pyarrow refuses what is not a mapping
        for name, member in value.items():
            if name not in children:
                return (
                    f"it has member {name!r}, which the struct's fields ({', '.join(children)}) "
                    "do not name and would be dropped"
                )
            inner = children[name]
            lost = None if inner is None or member is None else inner(member)
            if lost:
                return f"its member {name!r}: {lost}"
        for name in required:  # pyarrow would store a null there without a word
            if value.get(name) is None:
                return f"it has no value for member {name!r}, which the struct marks NOT NULL"
        return None

    return check


def _map_check(target: pa.MapType) -> Check:
    """A map's keys and values are checked as the key and item types' own values are.

    pyarrow takes a map as a dict, or as a list of (key, value) pairs or of entry
    dicts naming the map's key and item fields (any other member of an entry it drops).
    """
    key_name, item_name = target.key_field.name, target.item_field.name
    of_key, of_item = _member_check(target.key_type), _member_check(target.item_type)

    def entry_loss(key: Any, item: Any) -> str | None:
        lost = None if of_key is None or key is None else of_key(key)
        if lost:
            return f"its key {key!r}: {lost}"
        lost = None if of_item is None or item is None else of_item(item)
        if lost:
            return f"its value for key {key!r}: {lost}"
        return None

    def check(value: Any) -> str | None:
        if isinstance(value, Mapping):
            entries: Any = value.items()
        elif isinstance(value, list | tuple | np.ndarray):
            entries = value
        else:
            return None  # pyarrow refuses it
        for entry in entries:
            if entry is None:  # pyarrow aborts the process on it, raising nothing
                return "an entry is None, not a (key, value) pair"
            if isinstance(entry, tuple) and len(entry) == 2:
                lost = entry_loss(*entry)
            elif isinstance(entry, dict):
                extra = next((n for n in entry if n not in (key_name, item_name)), None)
                if extra is not None:
                    return (
                        f"an entry has member {extra!r}, which the map's entries "
                        f"({key_name}, {item_name}) do not name and would be dropped"
                    )
                lost = entry_loss(entry.get(key_name), entry.get(item_name))
            else:
                continue  # pyarrow refuses it
            if lost:
                return lost
        return None

    return check


def is_list_like(target: pa.DataType) -> bool:
    """Whether ``target`` holds a list of values (list, large, fixed-size or view)."""
    return bool(
        pa.types.is_list(target)
        or pa.types.is_large_list(target)
        or pa.types.is_fixed_size_list(target)
        or pa.types.is_list_view(target)
        or pa.types.is_large_list_view(target)
    )


def _items_check(inner: Check | None) -> Check:
    """The check of a value for a list type: a list it is, and its items fit ``inner``.

    pyarrow takes any Python sequence as a list, text and bytes too: ``"blue"`` would
    be stored as ``["b", "l", "u", "e"]`` and ``b"\\x01\\xff"`` as ``[1, 255]``, without
    a word. A user never means them as a list of their characters or bytes, so they
    are refused (:data:`_NOT_A_LIST`); any other value that is no sequence pyarrow
    refuses itself.
    """

    def check(value: Any) -> str | None:
        if isinstance(value, _NOT_A_LIST):
            return _not_a_list(value)
        if inner is None or not isinstance(value, list | tuple):
            return None
        for item in value:
            lost = None if item is None else inner(item)
            if lost:
                return f"an item: {lost}"
        return None

    return check


#: The sequences pyarrow would split into a list's items: text into its characters,
#: bytes into their numbers (numpy's str_ and bytes_ are subclasses of them).
_NOT_A_LIST = (str, *_BYTES)


def _not_a_list(value: Any) -> str:
    parts = "its characters" if isinstance(value, str) else "its byte values"
    return (
        f"it is {type(value).__name__}, not a list: a list field never takes it as a list "
        f"of {parts}; give [value] for a list of one item"
    )


def _integer_loss(value: Any) -> str | None:
    """The loss of ``value`` stored in an integer type (None: it fits, or pyarrow refuses it).

    pyarrow takes any object with ``__int__`` into an integer type and calls it: a
    float (Python's or numpy's, of any width) or a Fraction is truncated, a numpy
    complex loses its imaginary part, a UUID becomes its 128-bit number. Only a
    whole number is taken; a bool is refused (pyarrow refuses Python's, but takes
    numpy's as 1 or 0).
    """
    kind = type(value)
    if kind is int or isinstance(value, np.integer):
        return None  # pyarrow checks the range itself
    if isinstance(value, float | np.floating):
        return None if float(value).is_integer() else "it is not a whole number"
    if isinstance(value, decimal.Decimal):  # pyarrow truncates Decimal('2.5') to 2
        return (
            None
            if value.is_finite() and value == value.to_integral_value()
            else ("it is not a whole number")
        )
    if isinstance(value, np.bool_):
        return _BOOL
    if isinstance(value, numbers.Rational):  # a Fraction (int and bool are above)
        return None if value.denominator == 1 else "it is not a whole number"
    if isinstance(value, complex | np.complexfloating):
        return "it is a complex number, not an integer"
    if isinstance(value, uuid.UUID):
        return "it is a UUID, not a number: give int(value) if its number is meant"
    if hasattr(kind, "__int__") and not hasattr(kind, "__index__"):
        return f"it is {kind.__name__}, not an integer, and would be converted by int()"
    return None


#: Why a bool does not fit a number field (pyarrow makes True 1.0 in a float field, but
#: refuses it in an integer or decimal field, as a bool column is refused by every one).
_BOOL = "it is a bool, not a number"


#: pyarrow reads a numpy uint64 above this as the int64 of the same bits (2**64 - 1
#: becomes -1.0 in a float field, without a word).
_INT64_MAX = 2**63 - 1
_MISREAD = (
    "pyarrow reads a numpy uint64 above 2**63 - 1 as a negative number into a float "
    "field: give it as float(value)"
)


def _float64_loss(value: Any) -> str | None:
    if value is True or value is False:
        return _BOOL
    if isinstance(value, np.unsignedinteger) and value > _INT64_MAX:
        return _MISREAD
    return None


def _narrow_check(name: str, code: str, *, ints: bool) -> Check:
    """The loss of a Python number stored as the float type of struct format ``code``.

    ``ints``: pyarrow rounds an int into this type without a word (it refuses an int
    float32 does not hold exactly, but rounds one into float16).
    """
    narrow = struct.Struct("<" + code)
    pack, unpack = narrow.pack, narrow.unpack

    def check(value: Any) -> str | None:
        if isinstance(value, float):
            if value != value:  # NaN is NaN in any width
                return None
            number: float | int = value
        elif value is True or value is False:
            return _BOOL
        elif isinstance(value, np.unsignedinteger) and value > _INT64_MAX:
            return _MISREAD
        elif ints and isinstance(value, int | np.integer):
            number = int(value)
        else:
            return None  # exact (a numpy float of this width), or refused by pyarrow
        try:
            narrowed = unpack(pack(float(number)))[0]
        except OverflowError:
            return f"it is beyond the range of {name}"
        return None if narrowed == number else f"{name} holds it only as {narrowed!r}"

    return check


_FLOAT_CHECKS: dict[int, Check] = {
    16: _narrow_check("float16", "e", ints=True),
    32: _narrow_check("float32", "f", ints=False),
    64: _float64_loss,
}


# -- decimals and floats, converted exactly --------------------------------------


def exact_numbers(target: pa.DataType) -> Convert | None:
    """For a type with a float or a decimal in it (at the top, or inside lists, structs
    and maps), a function giving a value with every ``Decimal`` in a float place as that
    float and every float in a decimal place as that ``Decimal``, when they are the same
    number; ValueError naming the difference when they are not. None for other types.

    pyarrow refuses both conversions, so records were refused where an Arrow column of
    the same values is stored (:func:`~merkle.tablets.fitcolumn.fit_column` checks the
    same rule). Other values pass unchanged, for pyarrow and :func:`loss_check`.
    """
    if pa.types.is_floating(target):
        return _decimal_to_float(target)
    if pa.types.is_decimal(target):
        return _float_to_decimal(target)
    if pa.types.is_timestamp(target) or pa.types.is_duration(target) or pa.types.is_date(target):
        return _numpy_count(target)
    if pa.types.is_struct(target):
        members = {f.name: exact_numbers(f.type) for f in target}
        if all(m is None for m in members.values()):
            return None
        return lambda v: (
            {n: apply_convert(members.get(n), x) for n, x in v.items()}
            if isinstance(v, dict)
            else v
        )
    if pa.types.is_map(target):
        return _map_numbers(target)
    if is_list_like(target):
        inner = exact_numbers(target.value_type)
        if inner is None:
            return None
        return over_items(inner)
    return None


def _numpy_count(target: pa.DataType) -> Convert:
    """A numpy number or time as the Python int pyarrow takes into ``target`` (a
    timestamp, date or duration type) as a count of its unit.

    pyarrow takes a Python number into a timestamp or duration type as a count of its
    unit, but refuses a numpy one (it expects a ``datetime64`` or ``timedelta64``), while
    it takes both into a time or date type: a numpy integer, or a numpy float that is a
    whole number, is that Python int. A ``datetime64`` or ``timedelta64`` pyarrow takes
    only into a type of its own unit, and one of days into none: it is counted in
    ``target``'s unit exactly, or refused with the reason
    (:func:`~merkle.tablets.numpytimes.numpy_time_count`). Other values pass unchanged
    (a float that is not whole, for :func:`loss_check`).
    """

    def convert(value: Any) -> Any:
        if isinstance(value, NUMPY_TIMES):
            return numpy_time_count(value, target)
        if isinstance(value, np.integer) or (
            isinstance(value, np.floating) and float(value).is_integer()
        ):
            return int(value)
        return value

    return convert


def apply_convert(convert: Convert | None, value: Any) -> Any:
    """``convert(value)``, or ``value`` itself for no conversion or a null."""
    return value if convert is None or value is None else convert(value)


def over_items(inner: Convert) -> Convert:
    """``inner`` applied to each item of a list (or tuple) value; other values as they are."""
    return lambda v: [apply_convert(inner, x) for x in v] if isinstance(v, list | tuple) else v


def _map_numbers(target: pa.MapType) -> Convert | None:
    """:func:`exact_numbers` of a map's keys and values, in each form pyarrow takes a map."""
    of_key, of_item = exact_numbers(target.key_type), exact_numbers(target.item_type)
    if of_key is None and of_item is None:
        return None
    key_name, item_name = target.key_field.name, target.item_field.name

    def entry(e: Any) -> Any:
        if isinstance(e, tuple) and len(e) == 2:
            return (apply_convert(of_key, e[0]), apply_convert(of_item, e[1]))
        if isinstance(e, dict):
            return {
                n: apply_convert(
                    of_key if n == key_name else of_item if n == item_name else None, x
                )
                for n, x in e.items()
            }
        return e

    def convert(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {apply_convert(of_key, k): apply_convert(of_item, x) for k, x in value.items()}
        if isinstance(value, list | tuple):
            return [entry(e) for e in value]
        return value

    return convert


#: The struct format of each float width (to find the float of that width nearest a number).
_FLOAT_CODES = {16: "e", 32: "f", 64: "d"}


def _decimal_to_float(target: pa.DataType) -> Convert:
    """A ``Decimal`` as the float of ``target`` it is exactly (NaN and the infinities are
    that same value); ValueError when the float holds another number."""
    narrow = struct.Struct("<" + _FLOAT_CODES[target.bit_width])

    def convert(value: Any) -> Any:
        if not isinstance(value, decimal.Decimal):
            return value
        if value.is_snan():
            raise ValueError("it is a signalling NaN, which no float holds")
        if not value.is_finite():
            return float(value)
        try:
            near = narrow.unpack(narrow.pack(float(value)))[0]
        except OverflowError:
            raise ValueError(f"it is beyond the range of {target}") from None
        if math.isinf(near):
            raise ValueError(f"it is beyond the range of {target}")
        if decimal.Decimal(near) != value:
            raise ValueError(
                f"{target} does not hold it exactly: the nearest {target} is "
                f"{decimal.Decimal(near)}"
            )
        return near

    return convert


def _float_to_decimal(target: pa.DataType) -> Convert:
    """A float as the ``Decimal`` of the same number, when it has no more decimal places
    than ``target``'s scale; ValueError otherwise (pyarrow checks the precision)."""
    scale = int(target.scale)

    def convert(value: Any) -> Any:
        if not isinstance(value, float | np.floating):
            return value
        number = float(value)  # a numpy float widens exactly
        if not math.isfinite(number):
            raise ValueError(f"a decimal holds no {number}")
        if (fractions.Fraction(number) * fractions.Fraction(10) ** scale).denominator != 1:
            raise ValueError(
                f"the float is {decimal.Decimal(number)}, which has more decimal places "
                f"than the field's scale ({scale})"
            )
        return decimal.Decimal(number)

    return convert
