"""Values as ``merkle scan`` writes them, read back by the type of the field they go to.

``merkle.cli.output`` renders what JSON has no type for as text: bytes as
lowercase hex, dates, times and timestamps as ISO-8601, durations as Python
writes a ``timedelta`` (``1 day, 0:00:05``), decimals as their digits, NaN and
the infinities as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, a ``pa.uuid()``
as its text, a month_day_nano interval as ``[months, days, nanoseconds]``; a
CSV cell of a list, struct, map or interval holds its compact JSON. Read
without the table's types, that text would be stored as strings (or refused
by pyarrow). Here each value is read back by its field's Arrow type, the
inverse of the rendering, so that ``merkle load`` of a table's own export
gives back the records it holds. Every type of bytes (:func:`is_binary`:
views, dictionaries and extension storage too, at any depth) is read from
hex; a dictionary or run-end encoded field as its values, ``pa.bool8()`` as
true or false. Values are built in the field's plain type
(``merkle.tablets.schema.plain_type``), as the write path builds records.

No value is rounded or cut on the way (doc/cli.md): a number float32 or
float16 holds only rounded (``0.1``), and a fraction of a second finer than
a duration's, time's or timestamp's unit, are refused as ``Database.write``
refuses them; every digit a unit holds is kept (nanoseconds too:
``merkle.cli.isoticks``).

A value that does not convert raises :class:`BadValueError`, which says what the
field's values must look like.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import json
import math
import re
import uuid
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from merkle.cli.isoticks import time_ticks, timestamp_ticks, unit_digits
from merkle.errors import UsageError
from merkle.tablets.fits import loss_check, text_kind
from merkle.tablets.schema import is_list_type, plain_type

__all__ = [
    "BadValueError",
    "example",
    "from_rendered",
    "is_binary",
    "needs_converting",
    "typed_array",
    "typed_column",
]

#: What the output writes for a float that JSON cannot hold.
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
#: How pyarrow's cast from text spells an infinity (either case, a sign optional).
_INFINITY = r"^[+-]?(inf|infinity)$"
#: Bytes as the output writes them (lowercase hex), ``0x`` optional as for keys.
_HEX = re.compile(r"(?:0[xX])?((?:[0-9a-fA-F]{2})*)")
#: What a time unit coarser than Python's microseconds holds.
_UNITS = {"s": " (whole seconds)", "ms": " (whole milliseconds)"}
#: ``str(timedelta)``: ``0:00:05``, ``1 day, 0:00:05.000003``, ``-2 days, 23:00:00``; or a
#: ``duration[ns]`` as ``merkle scan`` writes one with nanoseconds: ``0:00:00.000000001``.
_DURATION = re.compile(r"(?:(-?\d+) days?, )?(\d+):([0-5]\d):([0-5]\d)(?:\.(\d{6}|\d{9}))?")


class BadValueError(UsageError):
    """A value that is not one of its field's type: ``row`` (0-based in its batch, None
    when not known), the field, the value as written, and what it should look like."""

    def __init__(self, reason: str, value: Any = None, row: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.value = value
        self.row = row
        self.field: str | None = None
        self.key: Any = None  # the record's key, as read (None: not known)


def is_binary(kind: pa.DataType) -> bool:
    """Whether ``kind`` holds bytes: binary, large_binary, binary_view, fixed_size_binary,
    a dictionary of them, or an extension type stored as them (``merkle.tablets.fits.
    text_kind``). Every path that reads bytes as hex asks this one question, so that no
    type of bytes gets the hex text itself stored as its bytes."""
    return text_kind(kind) == "binary"


def _is_uuid(kind: pa.DataType) -> bool:
    """Whether ``kind`` is ``pa.uuid()``, which the output writes as a UUID's text."""
    return isinstance(kind, pa.BaseExtensionType) and kind.extension_name == "arrow.uuid"


def _unwrapped(kind: pa.DataType) -> pa.DataType | None:
    """The type whose values stand for those of ``kind`` (None: ``kind``'s own): a
    dictionary's and a run-end encoded type's values, ``bool`` for ``pa.bool8()`` (read
    as True and False), another extension type's storage. ``pa.uuid()`` is its own."""
    if pa.types.is_dictionary(kind) or pa.types.is_run_end_encoded(kind):
        return kind.value_type
    if isinstance(kind, pa.BaseExtensionType) and not _is_uuid(kind):
        return pa.bool_() if kind.extension_name == "arrow.bool8" else kind.storage_type
    return None


def _json_in_cell(kind: pa.DataType) -> bool:
    """Whether a CSV cell of a field of ``kind`` holds JSON: a list, struct or map, an
    interval (``[1,2,3]``) and a bool of an extension type (``true``)."""
    plain = plain_type(kind)
    return bool(
        pa.types.is_nested(plain) or pa.types.is_interval(plain) or pa.types.is_boolean(plain)
    )


def needs_converting(kind: pa.DataType, fmt: str) -> bool:
    """Whether values of a field of ``kind``, as the output writes them in ``fmt`` (csv or
    jsonl), are not read as ``kind`` by pyarrow's reader of that format."""
    if pa.types.is_dictionary(kind):
        return needs_converting(kind.value_type, fmt)
    plain = (
        pa.types.is_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_null(kind)
    )
    if fmt == "csv":  # the CSV reader parses these from the text the output writes
        # Of the decimals only decimal128: pyarrow's CSV reader has no conversion to the
        # others. No float: the reader turns a number beyond the type's range (1e39 in
        # float32, 1e400 in float64) into Infinity without a word, so a float is read as
        # text and converted here, where such a number is refused (typed_column).
        plain = plain or pa.types.is_decimal128(kind) or pa.types.is_date(kind)
    return not plain


def example(kind: pa.DataType) -> str:
    """How a value of ``kind`` is written, as ``merkle scan`` writes one."""
    if _is_uuid(kind):
        return "a UUID such as 12345678-1234-5678-1234-567812345678"
    inner = _unwrapped(kind)
    if inner is not None:
        return example(inner)
    if pa.types.is_interval(kind):
        return "[months, days, nanoseconds], such as [1, 2, 3]"
    if pa.types.is_fixed_size_binary(kind):
        return f"{kind.byte_width} bytes in hexadecimal, such as {'00' * kind.byte_width}"
    if is_binary(kind):
        return "hexadecimal bytes such as 00ff (0x optional)"
    if pa.types.is_floating(kind):
        return 'a number, or "NaN", "Infinity" or "-Infinity"'
    if pa.types.is_decimal(kind):
        return f"a decimal number with at most {kind.scale} digits after the point"
    if pa.types.is_date(kind):
        return "an ISO-8601 date such as 2026-01-31"
    unit = _UNITS.get(getattr(kind, "unit", ""), "")
    if pa.types.is_time(kind):
        return f"an ISO-8601 time of day such as 12:30:00{unit}"
    if pa.types.is_timestamp(kind):
        zone = "2026-01-31T12:00:00+00:00" if kind.tz else "2026-01-31T12:00:00"
        return f"an ISO-8601 time such as {zone}{unit}"
    if pa.types.is_duration(kind):
        return f"a duration as merkle scan writes one, such as 0:30:00 or 2 days, 1:00:00{unit}"
    if pa.types.is_nested(kind):
        return "JSON as merkle scan writes it"
    if pa.types.is_boolean(kind):
        return "true or false"
    if pa.types.is_integer(kind):
        return "a whole number"
    return "text"


def _fail(kind: pa.DataType, value: Any) -> BadValueError:
    return BadValueError(f"is not {kind}: write {example(kind)}", value)


def _text(value: Any, kind: pa.DataType) -> str:
    if not isinstance(value, str):
        raise _fail(kind, value)
    return value


def _from_hex(value: Any, kind: pa.DataType) -> bytes:
    match = _HEX.fullmatch(_text(value, kind))
    if match is None:
        raise _fail(kind, value)
    return bytes.fromhex(match.group(1))


def _from_uuid(value: Any, kind: pa.DataType) -> bytes:
    try:
        return uuid.UUID(_text(value, kind).strip()).bytes
    except ValueError:
        raise _fail(kind, value) from None


def _from_interval(value: Any, kind: pa.DataType) -> pa.MonthDayNano:
    """``[months, days, nanoseconds]``, as the output writes a month_day_nano interval."""
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(part, int) and not isinstance(part, bool) for part in value)
    ):
        raise _fail(kind, value)
    return pa.MonthDayNano(value)


def _from_float(value: Any, kind: pa.DataType) -> float:
    """A JSON number, or a number written as text, as a float. An infinity comes only
    from its own spelling (``"Infinity"``, ``inf``): a JSON number decoded as one went
    beyond float64 (``1e400``; JSON has no infinite number), and so does text such as
    ``"1e400"``, which ``float`` makes Infinity without a word; both are refused."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int beyond every float's range
            raise _fail(kind, value) from None
        if math.isinf(number):
            raise beyond_range(kind, value)
        return number
    if isinstance(value, str) and value in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value]
    try:  # a CSV cell of a float16 field, or a number written as text
        number = float(_text(value, kind))
    except ValueError:
        raise _fail(kind, value) from None
    if math.isinf(number) and not re.fullmatch(_INFINITY, value.strip(), re.IGNORECASE):
        raise beyond_range(kind, value)
    return number


def beyond_range(kind: pa.DataType, value: Any, row: int | None = None) -> BadValueError:
    """The error for a number beyond the range of the float type ``kind``, which would
    be stored as Infinity: what to do instead (a narrower float can be widened; a
    float64 holds no larger number, so the value is kept as a decimal or as text)."""
    name = f"float{kind.bit_width}" if pa.types.is_floating(kind) else str(kind)
    if pa.types.is_float64(kind):
        fix = (
            "write a number float64 holds, or keep it exact as a decimal or as text "
            "(--column-types FIELD:decimal256(76,0) or FIELD:string, for a new table)"
        )
    else:
        fix = (
            f"write a number {name} holds, or widen the field to float64 (merkle table "
            "alter DB TABLE --widen FIELD:float64)"
        )
    return BadValueError(
        f"is beyond the range of {name} (it would be stored as Infinity): {fix}", value, row
    )


def _from_decimal(value: Any, kind: pa.DataType) -> decimal.Decimal:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = repr(value)
    try:
        number = decimal.Decimal(_text(value, kind).strip())
    except decimal.InvalidOperation:
        raise _fail(kind, value) from None
    if not number.is_finite():
        raise _fail(kind, value)
    return number


#: A duration unit's nanoseconds.
_NANOS_PER = {"ns": 1, "us": 1000, "ms": 1_000_000, "s": 1_000_000_000}


def _from_duration(value: Any, kind: pa.DataType) -> int:
    """A duration as ``str(timedelta)`` writes it (or with nine digits of a second, as
    ``merkle scan`` writes a ``duration[ns]``), as the count of ``kind``'s unit that the
    field stores. pyarrow's own conversion of a ``timedelta`` overflows near the ends of
    int64 (the least ``duration[us]``, ``-106751992 days, 19:59:05.224193``), and cuts a
    fraction of a second finer than the unit without a word: this neither."""
    match = _DURATION.fullmatch(_text(value, kind).strip())
    if match is None:
        raise _fail(kind, value)
    days, hours, minutes, seconds, fraction = match.groups()
    whole = ((int(days or 0) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds)
    count = whole * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))
    step = _NANOS_PER[kind.unit]
    if count % step:
        raise BadValueError(
            f"has a fraction of a second finer than the field's unit ({kind.unit}): "
            f"write {example(kind)}",
            value,
        )
    return count // step


def _from_iso(parse: Callable[[str], Any]) -> Callable[[Any, pa.DataType], Any]:
    def convert(value: Any, kind: pa.DataType) -> Any:
        try:
            return parse(_text(value, kind).strip())
        except ValueError:
            raise _fail(kind, value) from None

    return convert


def _exact_ticks(
    ticks: Callable[[str, str], int | Fraction],
) -> Callable[[Any, pa.DataType], int]:
    """The converter of a time or timestamp: its count of ``kind``'s unit, every digit of
    the fraction of a second read (``merkle.cli.isoticks``), which pyarrow builds exactly;
    a fraction finer than the unit (``00:00:00.0000015`` in ``time64[us]``) is refused,
    never cut as ``fromisoformat`` would cut it."""

    def convert(value: Any, kind: pa.DataType) -> int:
        try:
            count = ticks(_text(value, kind).strip(), kind.unit)
        except ValueError:
            raise _fail(kind, value) from None
        if count.denominator != 1:
            raise BadValueError(
                f"is not {kind}: it has a fraction of a second finer than its unit "
                f"({kind.unit}: {unit_digits(kind.unit)}): write {example(kind)}",
                value,
            )
        return int(count)

    return convert


def _scalar(kind: pa.DataType) -> Callable[[Any, pa.DataType], Any] | None:
    """The converter of a value of a scalar ``kind`` (None: the value is taken as it is)."""
    checks: list[tuple[Callable[[pa.DataType], bool], Callable[[Any, pa.DataType], Any]]] = [
        (is_binary, _from_hex),
        (pa.types.is_floating, _from_float),
        (pa.types.is_decimal, _from_decimal),
        (pa.types.is_duration, _from_duration),
        (pa.types.is_date, _from_iso(datetime.date.fromisoformat)),
        (pa.types.is_time, _exact_ticks(time_ticks)),
        (pa.types.is_timestamp, _exact_ticks(timestamp_ticks)),
    ]
    return next((convert for check, convert in checks if check(kind)), None)


def from_rendered(value: Any, kind: pa.DataType) -> Any:
    """The value of a field of ``kind`` that ``value`` (decoded JSON, or a CSV cell's text)
    stands for: the inverse of ``merkle.cli.output.jsonable``. BadValueError if it is none."""
    if value is None:
        return None
    if _is_uuid(kind):
        return _from_uuid(value, kind)
    inner = _unwrapped(kind)
    if inner is not None:
        try:
            return from_rendered(value, inner)
        except BadValueError as exc:  # named by the field's own type (bool8, not bool)
            exc.reason = exc.reason.replace(f"is not {inner}:", f"is not {kind}:", 1)
            raise
    if pa.types.is_interval(kind):
        return _from_interval(value, kind)
    if is_list_type(kind):
        if not isinstance(value, list):
            raise _fail(kind, value)
        return [from_rendered(item, kind.value_type) for item in value]
    if pa.types.is_struct(kind):
        if not isinstance(value, dict):
            raise _fail(kind, value)
        names = {kind.field(i).name: kind.field(i).type for i in range(kind.num_fields)}
        extra = [name for name in value if name not in names]
        if extra:
            raise BadValueError(f"has member {extra[0]!r}, which {kind} does not", value)
        return {name: from_rendered(value.get(name), member) for name, member in names.items()}
    if pa.types.is_map(kind):
        return _from_map(value, kind)
    convert = _scalar(kind)
    if convert is not None:
        return convert(value, kind)
    if isinstance(value, bool) != pa.types.is_boolean(kind) and not pa.types.is_null(kind):
        raise _fail(kind, value)
    return value


def _from_map(value: Any, kind: pa.DataType) -> list[tuple[Any, Any]]:
    """A map as the output writes one: a list of ``[key, value]`` pairs, or an object
    keyed by each key's text."""
    if isinstance(value, dict):
        return [
            (_map_key(key, kind.key_type), from_rendered(item, kind.item_type))
            for key, item in value.items()
        ]
    if not isinstance(value, list) or not all(
        isinstance(pair, list) and len(pair) == 2 for pair in value
    ):
        raise _fail(kind, value)
    return [
        (from_rendered(key, kind.key_type), from_rendered(item, kind.item_type))
        for key, item in value
    ]


def _map_key(text: str, kind: pa.DataType) -> Any:
    """A map key from the text an object shows it by (a number's or bool's JSON)."""
    if _scalar(kind) is not None or not (pa.types.is_integer(kind) or pa.types.is_boolean(kind)):
        return from_rendered(text, kind)
    try:
        return from_rendered(json.loads(text), kind)
    except ValueError:
        raise _fail(kind, text) from None


def _out_of_range(given: pa.Array, result: pa.Array, kind: pa.DataType) -> None:
    """BadValueError for the first row of ``result`` (``given`` converted to the float
    type ``kind``) that is infinite where ``given`` is a finite number: a number beyond
    the type's range, which pyarrow turns into Infinity without a word."""
    if not pa.types.is_floating(kind) or not pc.any(pc.is_inf(result)).as_py():
        return
    if pa.types.is_string(given.type) or pa.types.is_large_string(given.type):
        finite = pc.invert(pc.match_substring_regex(given, _INFINITY, ignore_case=True))
    elif pa.types.is_floating(given.type):
        finite = pc.invert(pc.is_inf(given))
    else:
        finite = pc.is_valid(given)  # integers and decimals are finite
    lost = pc.and_(pc.fill_null(pc.is_inf(result), False), pc.fill_null(finite, False))
    row = pc.index(lost, True).as_py()
    if row is not None and row >= 0:
        raise beyond_range(kind, given[row].as_py(), row)


def _rounded(kind: pa.DataType, value: Any, near: Any, row: int | None = None) -> BadValueError:
    """The error for a number the float type ``kind`` holds only as ``near``: the text
    paths refuse it as Parquet's and ``Database.write`` do (doc/cli.md, "No value is
    rounded"), and say what is held and how to keep the number."""
    name = f"float{kind.bit_width}"
    return BadValueError(
        f"is not a {name} number ({name} holds it only as {near!r}): write a number "
        f"{name} holds, or widen the field to float64 (merkle table alter DB TABLE "
        "--widen FIELD:float64)",
        value,
        row,
    )


def _refuse_rounded(given: pa.Array, result: pa.Array, kind: pa.DataType) -> None:
    """BadValueError for the first row of ``result`` (``given``, text or numbers,
    converted to the narrow float type ``kind``) that is not the number ``given`` is:
    pyarrow rounds ``0.1`` into float32 without a word. ``given`` is compared as float64,
    the number a JSON or CSV number is (and that ``merkle scan`` writes a float32 as)."""
    if not pa.types.is_floating(kind) or pa.types.is_float64(kind):
        return
    try:
        wide = given.cast(pa.float64())
    except (pa.ArrowException, ValueError):
        return  # not numbers: the conversion refused them already
    back = result.cast(pa.float64())
    same = pc.or_(pc.equal(wide, back), pc.and_(pc.is_nan(wide), pc.is_nan(back)))
    row = pc.index(pc.fill_null(same, True), False).as_py()
    if row is not None and row >= 0:
        raise _rounded(kind, given[row].as_py(), back[row].as_py(), row)


def _as_type(array: pa.Array, kind: pa.DataType) -> pa.Array:
    """``array`` (of ``plain_type(kind)``) cast to ``kind``: storage into its extension
    type, text into a dictionary or view. Arrow has no cast into a run-end encoded type;
    such a column is left as its values, which the write encodes as the field is."""
    if array.type == kind:
        return array
    try:
        return array.cast(kind)
    except pa.ArrowNotImplementedError:
        return array


def typed_array(values: list[Any], kind: pa.DataType) -> pa.Array:
    """``values`` (converted by :func:`from_rendered`) as an Array of ``kind``; a value
    the type cannot hold exactly (a time with microseconds in ``time32[s]``, ``0.1`` in
    float32) is a BadValueError, never truncated or rounded, and a number beyond a float
    type's range (1e39 in float32) one, never made Infinity.

    The values are built in ``kind``'s plain type (``merkle.tablets.schema.plain_type``:
    bool for ``pa.bool8()``, 16 bytes for ``pa.uuid()``, binary for ``binary_view``),
    as the write path builds records, and cast to ``kind`` after."""
    plain = plain_type(kind)
    array = None
    with contextlib.suppress(pa.ArrowException, ValueError, TypeError, OverflowError):
        array = pa.array(values, plain)  # times and timestamps as counts: built exactly
    if array is None:
        for row, value in enumerate(values):  # the first value that does not fit
            try:
                pa.array([value], plain)
            except (pa.ArrowException, ValueError, TypeError, OverflowError):
                raise BadValueError(
                    f"does not fit {kind}: write {example(kind)}", None, row
                ) from None
        raise BadValueError(f"does not fit {kind}: write {example(kind)}", None, None)
    if pa.types.is_floating(plain) and not pa.types.is_float64(plain):
        given = pa.array(values, pa.float64())
        _out_of_range(given, array, plain)
        _refuse_rounded(given, array, plain)
    elif pa.types.is_nested(plain):
        _refuse_nested_loss(values, plain)
    return _as_type(array, kind)


def _refuse_nested_loss(values: list[Any], plain: pa.DataType) -> None:
    """BadValueError for the first value with a value inside (a list's item, a struct's
    member) that pyarrow would round or cut without a word: ``0.1`` in float32, a time
    with a fraction of a second finer than its unit (``merkle.tablets.fits.loss_check``,
    the check ``Database.write`` makes of records; a duration's fraction is refused as
    it is read)."""
    check = loss_check(plain)
    if check is None:
        return
    for row, value in enumerate(values):
        lost = None if value is None else check(value)
        if lost:
            raise BadValueError(
                f"is not {plain} ({lost}): write values the field's type holds",
                None,
                row,
            )


#: The end of an ISO-8601 time that names its zone: ``12:00:00Z``, ``12:00+02:00``.
_ZONE = r":\d\d(:\d\d)?([.,]\d+)?(Z|[+-]\d\d(:?\d\d)?)$"


def _zoned_times(column: pa.Array, kind: pa.DataType) -> pa.Array | None:
    """ISO-8601 text as the zoned timestamp type ``kind``, a time without a zone taken as
    UTC (as a key on the command line, and as pyarrow takes a naive datetime); None when
    ``kind`` has no zone or the text is not all such times (then read value by value)."""
    if not pa.types.is_timestamp(kind) or kind.tz is None:
        return None
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    zoned = pc.fill_null(pc.match_substring_regex(column, _ZONE), False)
    none = pa.scalar(None, column.type)
    try:
        aware = pc.if_else(zoned, column, none).cast(pa.timestamp(kind.unit, tz="UTC"))
        naive = pc.if_else(zoned, none, column).cast(pa.timestamp(kind.unit))
        utc = pc.assume_timezone(naive, timezone="UTC")
        return pc.if_else(zoned, aware, utc).cast(kind)
    except (pa.ArrowException, ValueError):
        return None


def typed_column(column: pa.Array, kind: pa.DataType, cells: bool) -> pa.Array:
    """A column read as text converted to ``kind`` by :func:`from_rendered` (pyarrow's own
    cast first, where it has one and it succeeds). ``cells``: the text is a CSV cell,
    whose list, struct or map is written as JSON."""
    if column.type == kind:
        return column
    if pa.types.is_dictionary(kind) or pa.types.is_run_end_encoded(kind):
        return _as_type(typed_column(column, kind.value_type, cells), kind)
    casts: tuple[Callable[[pa.DataType], bool], ...] = (
        pa.types.is_date,
        pa.types.is_timestamp,
        pa.types.is_decimal,
        pa.types.is_floating,
    )
    if pa.types.is_string(column.type):  # a CSV cell of a run-end encoded int or bool
        casts += (pa.types.is_integer, pa.types.is_boolean)
    if any(check(kind) for check in casts):  # pyarrow's cast reads text as the output writes it
        if pa.types.is_floating(kind) and pa.types.is_string(column.type):
            column = pc.utf8_trim_whitespace(column)  # a cell ` 1.5`, as the CSV reader reads
        try:
            result = column.cast(kind)
        except (pa.ArrowException, ValueError):
            # no such cast, or a value it refuses (found below); times with and without
            # a zone in one zoned column are still converted in one pass
            zoned = _zoned_times(column, kind)
            if zoned is not None:
                return zoned
        else:
            _out_of_range(column, result, kind)
            _refuse_rounded(column, result, kind)
            return result
    values = column.to_pylist()
    converted = []
    for row, value in enumerate(values):
        try:
            if cells and value is not None and _json_in_cell(kind):
                try:
                    value = json.loads(value)
                except ValueError:
                    raise _fail(kind, value) from None
            converted.append(from_rendered(value, kind))
        except BadValueError as exc:
            exc.value, exc.row = values[row], row
            raise
    try:
        return typed_array(converted, kind)
    except BadValueError as exc:
        exc.value = None if exc.row is None else values[exc.row]
        raise
