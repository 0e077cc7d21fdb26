"""Arrow types named on the command line: ``--column-types``, ``--schema``, ``--add``, ``--widen``.

A type is written as Arrow prints it (``str(type)``), so one copied from ``merkle
table describe`` reads back as the same type: ``int32``, ``decimal128(10, 2)``,
``timestamp[us, tz=UTC]``, ``fixed_size_binary[16]``, ``list<item: int64>``,
``fixed_size_list<item: int16>[2]``, ``list_view<...>``, ``struct<a: int64, b:
string not null>``, ``map<string, int64, keys_sorted>``, ``dictionary<values=string,
indices=int32, ordered=0>``, ``run_end_encoded<...>``, unions, and Arrow's canonical
extension types (``extension<arrow.uuid>``); members keep their names and ``not
null`` marks (tests/cli/test_probe_types_cli2.py checks this for generated types).
What Arrow does not print cannot be read back: a map's NOT NULL values, a ``json``
extension's storage type, field metadata. A list of ``NAME:TYPE`` pairs is split on
its top-level commas only, never on those inside ``(...)``, ``[...]`` or ``<...>``.
Only pyarrow's type constructors are needed: no reader is imported here.
"""

from __future__ import annotations

import contextlib
import re

import pyarrow as pa

from merkle.cli.common import CliError

__all__ = ["parse_fields", "parse_type", "parse_types"]


#: The decimal types by the name Arrow prints them with (``decimal256(50, 10)``).
_DECIMALS = {
    "decimal32": pa.decimal32,
    "decimal64": pa.decimal64,
    "decimal128": pa.decimal128,
    "decimal256": pa.decimal256,
}


#: The list types by the name Arrow prints them with (``large_list<item: int64>``).
_LISTS = {
    "list": pa.list_,
    "large_list": pa.large_list,
    "list_view": pa.list_view,
    "large_list_view": pa.large_list_view,
}
#: How Arrow marks a member that holds no nulls.
_NOT_NULL = " not null"


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


def _closing(text: str, start: int) -> int:
    """The index of the ``>`` that closes the ``<`` at ``start`` (-1: none)."""
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] == "<"
        depth -= text[i] == ">"
        if depth == 0:
            return i
    return -1


def _field(text: str) -> pa.Field | None:
    """``name: TYPE`` or ``name: TYPE not null``, a member as Arrow prints it (None: not
    one). The name is the text before the first colon, so it holds no colon."""
    name, colon, rest = text.partition(":")
    name = name.strip()
    if not colon or not name or any(ch in name for ch in "<>()[]"):
        return None
    rest = rest.strip()
    nullable = not rest.endswith(_NOT_NULL)
    kind = parse_type(rest if nullable else rest[: -len(_NOT_NULL)])
    return pa.field(name, kind, nullable=nullable)


def _item(text: str) -> pa.Field:
    """A list's item: ``item: int64`` (named, ``not null`` optional) or ``int64``."""
    return _field(text) or pa.field("item", parse_type(text))


def _map_part(text: str, default: str, nullable: bool) -> pa.Field:
    """A map's key or value: ``TYPE``, or ``TYPE ('name')`` when its field is not named
    ``key`` / ``value`` (as Arrow prints it)."""
    text = text.strip()
    name = default
    found = re.fullmatch(r"(.*) \('(.*)'\)", text)
    if found is not None:
        text, name = found.group(1), found.group(2)
    return pa.field(name, parse_type(text), nullable=nullable)


def _settings(inner: str) -> dict[str, str]:
    """``a=x, b=y`` (top-level commas) as ``{a: x, b: y}``."""
    return {
        key.strip(): value.strip()
        for key, _, value in (part.partition("=") for part in _split_top(inner))
    }


def _fields(inner: str) -> list[pa.Field] | None:
    """A struct's members (None: one is not ``name: TYPE``)."""
    fields = []
    for part in _split_top(inner) if inner.strip() else []:
        field = _field(part)
        if field is None:
            return None
        fields.append(field)
    return fields


def _union(kind: str, inner: str) -> pa.DataType | None:
    """``dense_union<a: int8=0, b: string=1>`` (each member with its type code)."""
    fields, codes = [], []
    for part in _split_top(inner) if inner.strip() else []:
        member, equals, code = part.rpartition("=")
        field = _field(member) if equals and code.strip().isdigit() else None
        if field is None:
            return None
        fields.append(field)
        codes.append(int(code))
    union = pa.dense_union if kind == "dense_union" else pa.sparse_union
    return union(fields, type_codes=codes)


def _numbers(text: str) -> list[int]:
    """``[2,3]`` as ``[2, 3]``."""
    inside = text.strip().removeprefix("[").removesuffix("]")
    return [int(part) for part in inside.split(",") if part.strip()]


def _extension(name: str) -> pa.DataType | None:
    """One of Arrow's canonical extension types, by the name ``extension<...>`` shows."""
    simple = {"arrow.uuid": pa.uuid, "arrow.json": pa.json_, "arrow.bool8": pa.bool8}
    if name in simple:
        return simple[name]()
    kind, bracket, rest = name.partition("[")
    if not bracket or not rest.endswith("]"):
        return None
    rest = rest[:-1]
    if kind == "arrow.opaque":
        found = re.fullmatch(r"storage_type=(.*), type_name=(.*), vendor_name=(.*)", rest)
        if found is None:
            return None
        storage, type_name, vendor = found.groups()
        return pa.opaque(parse_type(storage), type_name, vendor)
    if kind == "arrow.fixed_shape_tensor":
        given = _settings(rest)
        names = given.get("dim_names")
        return pa.fixed_shape_tensor(
            parse_type(given["value_type"]),
            _numbers(given["shape"]),
            dim_names=None if names is None else names.strip("[]").split(","),
            permutation=_numbers(given["permutation"]) if "permutation" in given else None,
        )
    return None


def _nested_type(text: str) -> pa.DataType | None:
    """A type with ``<...>`` as Arrow prints it (so a type copied from ``table describe``
    reads back): lists of every kind, structs, maps, dictionaries, run-end encodings,
    unions and Arrow's canonical extension types; else None."""
    opening = text.find("<")
    closing = _closing(text, opening) if opening > 0 else -1
    if closing < 0:
        return None
    kind, inner, suffix = (
        text[:opening].strip().lower(),
        text[opening + 1 : closing],
        text[closing + 1 :],
    )
    if kind == "fixed_size_list":
        size = re.fullmatch(r"\s*\[\s*(\d+)\s*\]\s*", suffix)
        return None if size is None else pa.list_(_item(inner), int(size.group(1)))
    if suffix.strip():
        return None
    if kind in _LISTS:
        return _LISTS[kind](_item(inner))
    if kind == "struct":
        fields = _fields(inner)
        return None if fields is None else pa.struct(fields)
    if kind in ("dense_union", "sparse_union"):
        return _union(kind, inner)
    if kind == "extension":
        return _extension(inner.strip())
    parts = _split_top(inner)
    if kind == "map" and len(parts) in (2, 3):
        if len(parts) == 3 and parts[2].strip() != "keys_sorted":
            return None
        key = _map_part(parts[0], "key", nullable=False)
        return pa.map_(key, _map_part(parts[1], "value", True), keys_sorted=len(parts) == 3)
    if kind == "dictionary":
        given = _settings(inner)
        if set(given) != {"values", "indices", "ordered"} or given["ordered"] not in "01":
            return None
        ordered = given["ordered"] == "1"
        return pa.dictionary(parse_type(given["indices"]), parse_type(given["values"]), ordered)
    if kind == "run_end_encoded" and len(parts) == 2:
        ends, values = _field(parts[0]), _field(parts[1])
        if ends is None or values is None:
            return None
        return pa.run_end_encoded(ends.type, values.type)
    return None


def _sized(text: str) -> pa.DataType | None:
    """``decimal128(10, 2)``, ``timestamp[us, tz=UTC]``, ``fixed_size_binary[16]``."""
    lowered = text.replace(" ", "")
    width, paren, args = lowered.partition("(")
    if paren and width in _DECIMALS and args.endswith(")"):
        precision, _, scale = args[:-1].partition(",")
        with contextlib.suppress(ValueError, pa.ArrowException):
            return _DECIMALS[width](int(precision), int(scale or 0))
    if lowered.startswith("timestamp[") and lowered.endswith("]"):
        unit, _, zone = lowered[len("timestamp[") : -1].partition(",")
        with contextlib.suppress(ValueError, pa.ArrowException):
            return pa.timestamp(unit, tz=zone.removeprefix("tz=") or None)
    size = re.fullmatch(r"fixed_size_binary\[(\d+)\]", lowered)
    if size is not None:
        return pa.binary(int(size.group(1)))
    return None


def parse_type(text: str) -> pa.DataType:
    """An Arrow type from its name, as Arrow prints it: ``int32``, ``string``,
    ``decimal128(10, 2)``, ``timestamp[us, tz=Europe/Berlin]``, ``date32[day]``,
    ``fixed_size_binary[16]``, ``list<item: int64>`` (or ``list<int64>``),
    ``fixed_size_list<item: int16>[2]``, ``struct<a: int64, b: string not null>``,
    ``map<string, int64, keys_sorted>``, ``dictionary<values=string, indices=int32,
    ordered=0>``, ``extension<arrow.uuid>``, ..."""
    text = text.strip()
    with contextlib.suppress(ValueError):
        return pa.type_for_alias(text)
    found = _sized(text)
    if found is None:
        try:
            found = _nested_type(text)
        except (ValueError, KeyError, TypeError, pa.ArrowException):
            found = None  # a setting missing or malformed: no such type
    if found is not None:
        return found
    if text.lower().startswith("extension<"):
        raise CliError(
            f"unknown type {text!r}: the command line names Arrow's own extension types "
            "only (extension<arrow.uuid>, extension<arrow.json>, extension<arrow.bool8>, "
            "extension<arrow.opaque[...]>, extension<arrow.fixed_shape_tensor[...]>); "
            "declare a field of another extension type with the Python API "
            "(create_table(schema=...), alter_schema(add=...))"
        )
    raise CliError(
        f"unknown type {text!r}: write an Arrow type as Arrow prints it (and as merkle "
        "table describe shows it), such as int64, float64, string, bool, date32, "
        "decimal128(10, 2), timestamp[us, tz=UTC], fixed_size_binary[16], list<int64>, "
        "struct<a: int64, b: string>, map<string, int64> or extension<arrow.uuid>"
    )


def _pairs(text: str | None, option: str) -> list[tuple[str, str]]:
    """``name:type,name:type`` as ``[(name, type text)]``, split on top-level commas only
    (a decimal's comma and a struct's fields are kept with their type).

    A name given twice is a CliError naming ``option``, as the Python API refuses
    a schema that names a field twice: silently keeping one would be a guess.
    """
    if not text:
        return []
    pairs: list[tuple[str, str]] = []
    for part in _split_top(text):
        name, sep, kind = part.partition(":")
        if not sep or not name.strip():
            raise CliError(f"{part!r} is not NAME:TYPE (for example amount:decimal128(10,2))")
        name = name.strip()
        if any(name == seen for seen, _ in pairs):
            raise CliError(
                f"{option} gives field {name!r} more than once; give each field one type"
            )
        pairs.append((name, kind.strip()))
    return pairs


def parse_types(text: str | None, option: str = "--column-types") -> dict[str, pa.DataType]:
    """``name:type,name:type`` as ``{name: type}`` (see :func:`_pairs`). A type ending
    in ``not null`` is a CliError: ``option`` takes a type, and only ``--schema`` (a
    new table's fields, :func:`parse_fields`) says whether a field holds nulls."""
    out: dict[str, pa.DataType] = {}
    for name, kind in _pairs(text, option):
        if kind.endswith(_NOT_NULL):
            raise CliError(
                f"{option} {name}:{kind}: {option} takes a type, without 'not null' "
                "(only merkle table create --schema declares a field NOT NULL)"
            )
        out[name] = parse_type(kind)
    return out


def parse_fields(text: str | None, option: str = "--schema") -> list[pa.Field]:
    """``name:type,name:type not null`` as fields, in order: a line of ``merkle table
    describe``'s schema (``name: type``, ``not null`` marked) reads back as its field."""
    fields = []
    for name, kind in _pairs(text, option):
        nullable = not kind.endswith(_NOT_NULL)
        kind = kind if nullable else kind[: -len(_NOT_NULL)]
        fields.append(pa.field(name, parse_type(kind), nullable=nullable))
    return fields
