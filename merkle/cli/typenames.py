"""Arrow types named on the command line: ``--column-types``, ``--schema``, ``--add``, ``--widen``.

A type is written as Arrow prints it, so one copied from ``merkle table
describe`` reads back: ``int32``, ``decimal128(10, 2)``, ``timestamp[us,
tz=UTC]``, ``list<item: int64>``, ``struct<a: int64, b: string>``,
``map<string, int64>``. A list of ``NAME:TYPE`` pairs is split on its
top-level commas only, never on those inside ``(...)``, ``[...]`` or ``<...>``.
Only pyarrow's type constructors are needed: no reader is imported here.
"""

from __future__ import annotations

import pyarrow as pa

from merkle.cli.common import CliError

__all__ = ["parse_type", "parse_types"]


#: The decimal types by the name Arrow prints them with (``decimal256(50, 10)``).
_DECIMALS = {
    "decimal32": pa.decimal32,
    "decimal64": pa.decimal64,
    "decimal128": pa.decimal128,
    "decimal256": pa.decimal256,
}


def _split_top(text: str) -> list[str]:
    """``text`` split on its top-level commas: not those inside ``(...)``, ``[...]`` or
    ``<...>`` (a decimal's scale, a timestamp's zone, a struct's fields)."""
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(text):
        depth += ch in "([<"
        depth -= ch in ")]>"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _nested_type(text: str) -> pa.DataType | None:
    """``list<T>``, ``large_list<T>``, ``struct<a: T, ...>`` or ``map<K, V>`` (as Arrow
    prints them, so a type copied from ``table describe`` reads back), else None."""
    kind, sep, rest = text.partition("<")
    kind = kind.strip().lower()
    if not sep or not rest.endswith(">") or kind not in ("list", "large_list", "struct", "map"):
        return None
    inner = rest[:-1]
    if kind in ("list", "large_list"):
        name, colon, item = inner.partition(":")
        # ``list<item: int64>`` names its item; ``list<int64>`` does not.
        element = parse_type(item if colon and "<" not in name else inner)
        return pa.list_(element) if kind == "list" else pa.large_list(element)
    parts = _split_top(inner)
    if kind == "map":
        if len(parts) != 2:
            return None
        return pa.map_(parse_type(parts[0]), parse_type(parts[1]))
    fields = []
    for part in parts:
        name, colon, member = part.partition(":")
        if not colon or not name.strip():
            return None
        fields.append(pa.field(name.strip(), parse_type(member)))
    return pa.struct(fields)


def parse_type(text: str) -> pa.DataType:
    """An Arrow type from its name: ``int32``, ``string``, ``decimal128(10,2)``,
    ``timestamp[us, tz=Europe/Berlin]``, ``date32``, ``list<int64>``,
    ``struct<a: int64, b: string>``, ``map<string, int64>``, ..."""
    text = text.strip()
    try:
        return pa.type_for_alias(text)
    except ValueError:
        pass
    lowered = text.replace(" ", "")
    width, paren, args = lowered.partition("(")
    if paren and width in _DECIMALS and args.endswith(")"):
        precision, _, scale = args[:-1].partition(",")
        try:
            return _DECIMALS[width](int(precision), int(scale or 0))
        except (ValueError, pa.ArrowException):
            pass
    if lowered.startswith("timestamp[") and lowered.endswith("]"):
        unit, _, zone = lowered[len("timestamp[") : -1].partition(",")
        try:
            return pa.timestamp(unit, tz=zone.removeprefix("tz=") or None)
        except (ValueError, pa.ArrowException):
            pass
    nested = _nested_type(text)
    if nested is not None:
        return nested
    raise CliError(
        f"unknown type {text!r}: use an Arrow type name such as int32, int64, float64, "
        "string, bool, date32, decimal128(10,2), decimal256(50,10), timestamp[us], "
        "timestamp[us, tz=UTC], list<int64> or struct<a: int64, b: string>"
    )


def parse_types(text: str | None, option: str = "--column-types") -> dict[str, pa.DataType]:
    """``name:type,name:type`` as ``{name: type}``, split on top-level commas only (a
    decimal's comma and a struct's fields are kept with their type).

    A name given twice is a CliError naming ``option``, as the Python API refuses
    a schema that names a field twice: silently keeping one would be a guess.
    """
    if not text:
        return {}
    out: dict[str, pa.DataType] = {}
    for part in _split_top(text):
        name, sep, kind = part.partition(":")
        if not sep or not name.strip():
            raise CliError(f"{part!r} is not NAME:TYPE (for example amount:decimal128(10,2))")
        name = name.strip()
        if name in out:
            raise CliError(
                f"{option} gives field {name!r} more than once; give each field one type"
            )
        out[name] = parse_type(kind)
    return out
