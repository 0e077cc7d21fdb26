"""What ``Database.write`` accepts, turned into Arrow or a list of records.

Records are dicts that hold the key fields, or a mapping key -> dict. Arrow
data is a ``pyarrow.Table``, ``RecordBatch`` or ``RecordBatchReader``, or any
object that exports an Arrow stream (``__arrow_c_stream__``: pandas and
Polars DataFrames, DuckDB results, ...). A pandas DataFrame keeps a named
index as columns (``df.set_index("id")`` writes ``id``); an unnamed index is
not data and is dropped (see :mod:`merkle.db.frames`), and its columns are
copied where pyarrow would share the frame's memory. Arrow data is kept as it
is (Arrow data does not change once built; doc/api.md tells the caller not to
change a numpy array an Arrow array was built over without a copy).
"""

from __future__ import annotations

import contextlib
import math
import operator
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from merkle.blocks.codec import encode_node
from merkle.blocks.nesting import MAX_CBOR_DEPTH
from merkle.db.copies import snapshot
from merkle.db.frames import pandas_table
from merkle.errors import SchemaError, UsageError
from merkle.tablets.conform import KeyLayout

if TYPE_CHECKING:
    from merkle.tablets.evolve import SchemaChange

__all__ = [
    "as_rows",
    "check_count",
    "check_families_arg",
    "check_field_name",
    "check_fields",
    "check_flag",
    "check_function",
    "check_key_codec_arg",
    "check_key_fields",
    "check_keys",
    "check_known_fields",
    "check_metadata",
    "check_names_list",
    "check_resolved",
    "check_schema_change",
    "check_table_name",
    "disagreeing_field",
    "given_metadata",
    "is_arrow_like",
    "key_parts",
    "once_readable",
    "same_metadata",
    "same_value",
]


def is_arrow_like(data: Any) -> bool:
    """Whether ``data`` is Arrow data or exports an Arrow stream (a DataFrame, ...)."""
    return isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader) or hasattr(
        data, "__arrow_c_stream__"
    )


def as_arrow(
    data: Any,
    schema: pa.Schema | None = None,
    key: KeyLayout | None = None,
    table: str = "this table",
) -> pa.Table | pa.RecordBatch:
    """Arrow data (or a DataFrame) as a pyarrow Table or RecordBatch, schema metadata dropped.

    A pandas DataFrame is converted by :func:`~merkle.db.frames.pandas_table`:
    ``schema`` (the table's, when known) types a column no inference reads (a map
    field as ``to_pandas`` gives it), ``key`` and ``table`` name a misfit value.
    """
    if isinstance(data, pa.Table | pa.RecordBatch):
        return data
    table_in = pandas_table(data, schema, key, table)
    if table_in is None:
        if isinstance(data, pa.RecordBatchReader):
            table_in = data.read_all()
        else:
            try:
                table_in = pa.table(data)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                raise UsageError(
                    f"cannot read {type(data).__name__} as Arrow data: {exc}"
                ) from None
    return table_in.replace_schema_metadata(None)


def once_readable(
    data: Any,
    schema: pa.Schema | None = None,
    key: KeyLayout | None = None,
    table: str = "this table",
) -> Any:
    """``data`` in a form that can be read more than once: Arrow-like data as a pyarrow
    Table or RecordBatch, an iterator of records as a list; anything else as it is.

    A DataFrame is converted as ``write`` converts it (:func:`as_arrow` with the
    table's ``schema``, ``key`` and name), so that every call taking rows takes
    the DataFrames ``write`` does (a map field as ``to_pandas`` gives it)."""
    if is_arrow_like(data):
        return as_arrow(data, schema, key, table)
    if isinstance(data, Mapping | str | bytes | Sequence) or not isinstance(data, Iterable):
        return data
    return list(data)


def as_rows(
    data: Any, key: KeyLayout, table: str, schema: pa.Schema | None = None
) -> pa.Table | pa.RecordBatch | list[Mapping[str, Any]]:
    """What ``write`` was given, as Arrow or as a list of records holding the key fields
    (``schema``, the table's when known, types a DataFrame column inference cannot)."""
    if is_arrow_like(data):
        return as_arrow(data, schema, key, table)
    if isinstance(data, Mapping):
        out: list[Mapping[str, Any]] = []
        for value, record in data.items():
            if not isinstance(record, Mapping):
                raise UsageError(
                    f"records for table {table!r} given as a mapping must map keys to dicts; "
                    f"key {value!r} maps to {type(record).__name__}"
                )
            out.append({**record, **_key_fields(key, value, record)})
        return out
    if isinstance(data, str | bytes) or not isinstance(data, Iterable):
        raise UsageError(
            f"records for table {table!r} must be dicts, a mapping key -> dict, Arrow data or "
            f"a DataFrame; got {type(data).__name__}"
        )
    listed = list(data)
    for i, record in enumerate(listed):
        if not isinstance(record, Mapping):
            raise UsageError(
                f"record {i} for table {table!r} is a {type(record).__name__}, not a dict"
            )
        missing = key.missing(record)
        if missing is not None:
            raise UsageError(f"record {i} for table {table!r} has no value for {missing}")
    return listed


def _key_fields(key: KeyLayout, value: Any, record: Mapping[str, Any]) -> dict[str, Any]:
    """The key fields a record under ``value`` holds (checked against what it already holds)."""
    parts = key_parts(key, value, f"a record keyed by {value!r}")
    name = disagreeing_field(parts, record)
    if name is not None:
        raise UsageError(
            f"record under key {value!r} holds {name}={record[name]!r}: the two must agree"
        )
    return parts


def key_parts(key: KeyLayout, value: Any, what: str) -> dict[str, Any]:
    """The key fields of key ``value`` by name; a composite key that is not a tuple (or
    list) of as many values is a UsageError starting with ``what``."""
    if not key.composite:
        return {key.fields[0]: value}
    if not isinstance(value, tuple | list) or len(value) != len(key.fields):
        raise UsageError(
            f"{what}: the key {list(key.fields)} needs a tuple of {len(key.fields)} values"
        )
    return dict(zip(key.fields, value, strict=True))


def disagreeing_field(parts: Mapping[str, Any], record: Mapping[str, Any]) -> str | None:
    """The first key field ``record`` names with a value other than its key's own."""
    for name, part in parts.items():
        if name in record and not same_value(record[name], part):
            return name
    return None


def same_value(a: Any, b: Any) -> bool:
    """Whether two key values are equal as keys; a comparison that raises or gives no plain
    bool (a numpy array, an object with an odd ``__eq__``) counts as different. A naive
    and an aware datetime of the same instant are one key (naive is UTC, as the key
    codec takes it); a bool is no number (``True`` is not key 1: bools are no keys)."""
    if isinstance(a, bool | np.bool_) != isinstance(b, bool | np.bool_):
        return False
    if (
        isinstance(a, datetime)
        and isinstance(b, datetime)
        and (a.tzinfo is None) != (b.tzinfo is None)
    ):
        a, b = (x.replace(tzinfo=UTC) if x.tzinfo is None else x for x in (a, b))
    try:
        result = a == b
        return bool(result) if isinstance(result, bool | np.bool_) else False
    except Exception:  # any user type's __eq__ may raise anything
        return False


def check_flag(value: Any, what: str) -> bool:
    """A yes/no argument as a bool: a bool or numpy bool; anything else is a UsageError
    (a truthy ``"no"`` would otherwise turn the flag on)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise UsageError(f"{what} must be True or False, got {type(value).__name__} {value!r}")


def check_count(value: Any, what: str, least: int = 0, *, text: bool = False) -> int:
    """A whole number of at least ``least``, as an int; a UsageError naming ``what`` for
    anything else (a bool, 1.5, nan, a numpy array). ``text``: the argument may come from
    a command-line or URI option, so a string of digits (``"4"``) and a float with no
    fraction (``1e9``) are read as the number they write."""
    number: Any = value
    if text and isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = value
    if text and isinstance(number, float) and math.isfinite(number) and number.is_integer():
        number = int(number)
    if not isinstance(number, bool | np.bool_):
        with contextlib.suppress(TypeError):
            number = operator.index(number)
            if number >= least:
                return int(number)
    raise UsageError(
        f"{what} must be at least {least}, a whole number; got {type(value).__name__} {value!r}"
    )


def check_key_codec_arg(key_codec: Any, table: str) -> str | None:
    """``create_table``'s ``key_codec``: None, a spec string, or a list of component specs
    (a composite key), as one spec string."""
    if key_codec is None or isinstance(key_codec, str):
        return key_codec
    if isinstance(key_codec, list | tuple) and all(isinstance(p, str) for p in key_codec):
        return "tuple(" + ",".join(key_codec) + ")"
    raise UsageError(
        f"key_codec of table {table!r} must be a codec spec such as 'int' or "
        f"'tuple(str,int)' (or a list of specs), got {type(key_codec).__name__} {key_codec!r}"
    )


def check_families_arg(families: Any, table: str) -> dict[str, Any] | None:
    """``families`` as a dict of family name -> field names (None stays None)."""
    if families is None:
        return None
    if not isinstance(families, Mapping):
        raise UsageError(
            f"families of table {table!r} must be a dict of family name -> list of field "
            f"names, such as {{'prices': ['price', 'qty']}}, got {type(families).__name__} "
            f"{families!r}"
        )
    return dict(families)


def check_function(fn: Any, what: str) -> None:
    """UsageError unless ``fn`` can be called (``what`` names the argument)."""
    if not callable(fn):
        raise UsageError(
            f"{what} must be a function of the old metadata (and any further arguments) "
            f"returning the new metadata, got {type(fn).__name__} {fn!r}"
        )


def check_names_list(names: Any, what: str) -> list[str]:
    """A list of strings given as a list or tuple (not one string, not anything else)."""
    if isinstance(names, list | tuple) and all(isinstance(n, str) for n in names):
        return list(names)
    raise UsageError(f"{what} must be a list of strings, got {type(names).__name__} {names!r}")


def check_fields(fields: Sequence[str] | None) -> list[str] | None:
    """``fields`` as a list of non-empty names (None stays None)."""
    if fields is None:
        return None
    if isinstance(fields, str):
        raise UsageError(f"fields must be a list of field names, not the string {fields!r}")
    if isinstance(fields, bytes | bytearray | Mapping) or not isinstance(fields, Iterable):
        raise UsageError(
            f"fields must be a list of field names, got {type(fields).__name__} {fields!r}"
        )
    out = list(fields)
    for f in out:
        if not isinstance(f, str) or not f:
            raise UsageError(f"field names must be non-empty strings, got {f!r}")
    return out


def check_known_fields(
    fields: Sequence[str] | None, schema: pa.Schema | None, table: str
) -> list[str] | None:
    """``fields`` (as :func:`check_fields`), each a field of ``schema``: a read naming a
    field the table does not have is a UsageError, not records that seem to lack it.

    Without a schema (a table from before schemas, or one never written) the names
    are not checked: there is no list of fields to check them against.
    """
    out = check_fields(fields)
    if out is None or schema is None:
        return out
    unknown = [name for name in out if name not in schema.names]
    if unknown:
        raise UsageError(
            f"table {table!r} has no field {unknown[0]!r}; its fields: "
            f"{', '.join(schema.names)}: read only fields the table has (fields=None reads all)"
        )
    return out


def check_keys(keys: Any, table: str) -> list[Any]:
    """A list of keys; a single string or bytes is a UsageError (it is not a list of keys).
    An Arrow array or chunked array (a table's key column) gives its Python values."""
    if _is_rows(keys):  # iterating a DataFrame gives its column names, not keys
        raise UsageError(
            f"keys for table {table!r} must be a list of keys, got a {type(keys).__name__} "
            "(rows, whose iteration gives column names, not keys): pass the key column's "
            "values, e.g. df['id'].tolist() (for a composite key, "
            "list(df[['a', 'b']].itertuples(index=False, name=None)))"
        )
    if isinstance(keys, str | bytes | bytearray) or not isinstance(keys, Iterable):
        raise UsageError(
            f"keys for table {table!r} must be a list of keys, got the "
            f"{type(keys).__name__} {keys!r}: pass [{keys!r}] for one key"
        )
    if isinstance(keys, pa.Array | pa.ChunkedArray):  # iterating one gives Arrow scalars
        return list(keys.to_pylist())
    return list(keys)


def _is_rows(data: Any) -> bool:
    """Whether ``data`` is a table of rows (Arrow or a DataFrame), not a column of values
    (a ``ChunkedArray`` or a Polars ``Series`` exports an Arrow stream too)."""
    if isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        return True
    return hasattr(data, "__arrow_c_stream__") and hasattr(data, "columns")


def check_table_name(name: object, *, creating: bool = False) -> str:
    """A table name: a non-empty string of printable characters, at most 255 bytes.

    ``creating``: a new table's name must also hold no C1 control character
    and be in Unicode normal form NFC, as database names are, so that two
    names that look the same cannot name two tables (checked when a table is
    made, so that a table made before the rule stays readable).
    """
    if not isinstance(name, str) or not name:
        raise UsageError(f"a table name must be a non-empty string, got {name!r}")
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise UsageError(
            f"table name {name!r} is invalid: it holds an unpaired surrogate, which UTF-8 "
            "cannot store"
        ) from None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name) or size > 255:
        raise UsageError(
            f"table name {name!r} is invalid: use at most 255 bytes and no control characters"
        )
    if creating:
        if any(unicodedata.category(ch) == "Cc" for ch in name):
            raise UsageError(f"table name {name!r} is invalid: it holds a control character")
        normal = unicodedata.normalize("NFC", name)
        if normal != name:
            raise UsageError(
                f"table name {name!r} is not in Unicode normal form NFC: use {normal!r}, "
                "which looks the same"
            )
    return name


def check_field_name(name: str, table: str) -> str:
    """A field name that UTF-8 (and so Arrow) can store; UsageError naming it if not."""
    try:
        name.encode()
    except UnicodeEncodeError:
        raise UsageError(
            f"field name {name!r} of table {table!r} holds an unpaired surrogate, which "
            "UTF-8 cannot store"
        ) from None
    return name


def check_metadata(value: Any, what: str) -> Any:
    """A copy of ``value`` if it can be stored in a node (DAG-CBOR), else a UsageError
    naming ``what``.

    Metadata sits in its root node's map, so it has one level less than a node
    (:data:`~merkle.blocks.nesting.MAX_CBOR_DEPTH`): deeper, the root would be
    written but could not be read. The copy (:func:`~merkle.db.copies.snapshot`) is
    what the value keeps: the caller's dict, kept, would let an edit of it after the
    call change the value, and the next commit store the edit.
    """
    try:
        encode_node(value, room=MAX_CBOR_DEPTH - 1)
    except UsageError as exc:
        raise UsageError(f"{what} cannot be stored: {exc}") from None
    return snapshot(value)


def given_metadata(stored: Any) -> Any:
    """What a metadata function is given: a copy of the stored metadata, or an empty map
    where none was ever set (None), so that ``lambda m: {**m, "x": 1}`` works on both."""
    return {} if stored is None else snapshot(stored)


def same_metadata(new: Any, old: Any) -> bool:
    """Whether metadata ``new`` (checked by :func:`check_metadata`) is stored as ``old`` is:
    the same DAG-CBOR bytes, so that setting it changes nothing. Python's ``==`` is not
    the rule: ``{"n": 1} == {"n": True}`` though they are stored apart, and a tuple is
    stored as the list it equals by content but not by ``==``. Metadata never set
    (None) is the empty map a metadata function is given for it (:func:`given_metadata`):
    a function returning it unchanged changes nothing."""
    try:
        return encode_node(new or {}) == encode_node(old or {})
    except UsageError:  # ``old`` cannot be stored at all: not what ``new`` stores
        return False


def check_key_fields(key: Any, table: str) -> str | tuple[str, ...]:
    """A table's key as given to ``create_table``: one field name, or several (a composite
    key) as a tuple; UsageError for anything else (None, a number, an empty list)."""
    if isinstance(key, str):
        return check_field_name(key, table)
    if isinstance(key, Sequence) and key and all(isinstance(k, str) for k in key):
        for part in key:
            check_field_name(part, table)
        return tuple(key)
    raise UsageError(
        f"key of table {table!r} must be a field name or a list of field names, got {key!r}"
    )


def check_renames(rename: Any, table: str) -> None:
    """``alter_schema``'s ``rename``: a mapping of field names to non-empty new names."""
    if rename is None:
        return
    if not isinstance(rename, Mapping):
        raise SchemaError(
            f"table {table!r}: rename takes a mapping old name -> new name, "
            f"got {type(rename).__name__}"
        )
    for old, new in rename.items():
        if not isinstance(new, str) or not new:
            raise SchemaError(
                f"table {table!r}: cannot rename {old!r} to {new!r}: a field name must be a "
                "non-empty string"
            )
        check_field_name(new, table)


#: Parts of one ``alter_schema`` call that may name the same field: they do not
#: change what the other means (a widened field made nullable, a nullable one freed).
_COMPATIBLE = ({"widen", "nullable"}, {"nullable", "free"})


def check_schema_change(change: SchemaChange, table: str) -> None:
    """A SchemaError when two parts of one ``alter_schema`` call name the same field.

    The parts apply in a fixed order (add, drop, rename, widen, nullable, free), so
    ``rename={"y": "z"}, drop=["y"]`` would fail on a field the drop removed, and
    ``widen={"a": ...}, rename={"a": "b"}`` on a field the rename moved: ambiguous
    calls are refused whole, naming the field and both parts, instead.
    """
    parts: dict[str, list[str]] = {
        "add": [f.name for f in change.add],
        "drop": list(change.drop),
        "rename": [*change.rename, *change.rename.values()],
        "widen": list(change.widen),
        "nullable": list(change.nullable),
        "free": list(change.free),
    }
    seen: dict[str, str] = {}
    for part, names in parts.items():
        for name in dict.fromkeys(names):
            first = seen.setdefault(name, part)
            if first != part and {first, part} not in _COMPATIBLE:
                raise SchemaError(
                    f"table {table!r}: alter_schema names field {name!r} in both {first} and "
                    f"{part}: one call changes a field in one way only; make two alter_schema "
                    "calls, in the order you mean"
                )


def check_resolved(
    chosen: Any, key: Any, layout: KeyLayout, table: str
) -> Mapping[str, Any] | None:
    """What a merge's ``resolve`` function returned for the conflict on ``key``: a record
    (a mapping) of that same key, or None (delete it). Anything else is a UsageError
    naming the table and key, instead of a TypeError or a silently ignored key."""
    if chosen is None:
        return None
    if not isinstance(chosen, Mapping):
        raise UsageError(
            f"the merge resolver returned {type(chosen).__name__} {chosen!r} for key {key!r} "
            f"of table {table!r}: return a record (a dict), or None to delete the record"
        )
    parts = key_parts(layout, key, f"the conflict on key {key!r} of table {table!r}")
    name = disagreeing_field(parts, chosen)
    if name is not None:
        raise UsageError(
            f"the merge resolver returned a record with {name}={chosen[name]!r} for the "
            f"conflict on key {key!r} of table {table!r}: a resolver cannot change the "
            "key; return the record under its own key (or None to delete it)"
        )
    return chosen
