"""One field's Python values (of written records) as a checked Arrow column.

:func:`record_column` is what :func:`~merkle.tablets.conform.conform_records`
builds each typed field with, on every write path of records (write, upsert,
update). A field whose type holds an extension type (``pa.uuid()``,
``pa.json_()``, a tensor, one the user registered) inside a list, struct or
map is built in its :func:`~merkle.tablets.schema.plain_type` (pyarrow has no
converter for a nested extension type: every such record was refused) and
cast to the type it is stored in after, so every value is held to the checks
its storage's values get (a uuid takes a ``uuid.UUID`` or 16 bytes, never
text; a json takes text, never bytes), at the top and at any depth alike.

Text and bytes keep their kind (:func:`kind_error`): one rule and one message
for records and Arrow data (:func:`check_kind_column`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from merkle.errors import SchemaError
from merkle.lazy import compute as pc
from merkle.tablets.dicts import check_fits, has_dictionary
from merkle.tablets.fitcolumn import typed_array
from merkle.tablets.fits import kind_misfit, text_kind
from merkle.tablets.nestedvalues import prepared_values
from merkle.tablets.nullness import check_inner_nulls
from merkle.tablets.schema import check_nanoseconds, plain_type, show_value, storage_type

__all__ = ["check_kind_column", "kind_error", "record_column"]


def record_column(
    name: str,
    values: list[Any],
    declared: pa.DataType,
    key_of: Callable[[int], Any],
    *,
    nanos: bool = False,
) -> pa.Array:
    """The values of field ``name`` (declared ``declared``; ``key_of(i)`` the key of
    record ``i``) as an array of the field's :func:`~merkle.tablets.schema.storage_type`;
    SchemaError naming the first value that does not fit.

    ``nanos``: the values are plain scalars that may be nanosecond times (see
    :func:`~merkle.tablets.schema.check_nanoseconds`).
    """
    stored = storage_type(declared)
    plain = plain_type(stored)
    misfit = kind_misfit(values, declared)
    if misfit is not None:
        raise kind_error(name, declared, values[misfit], key_of(misfit))
    try:
        if nanos:
            check_nanoseconds(name, values, plain, key_of)
        given = prepared_values(name, values, plain, key_of)  # numpy arrays, map entries
        array = typed_array(name, given, plain, key_of)
    except SchemaError as exc:
        if plain == declared:
            raise
        # the field is named by its declared type (a dictionary, an extension type), not
        # the storage its values are built in
        named = f"field {name!r} is "
        text = str(exc).replace(named + f"{plain}", named + f"{declared}", 1)
        raise SchemaError(text) from None
    check_inner_nulls(name, array, key_of)
    if plain != stored:
        array = array.cast(stored)  # storage into extension: no value changes
    if stored != declared and has_dictionary(declared):  # only a dictionary stores apart
        check_fits(name, array, declared)
    return array


def kind_error(name: str, target: pa.DataType, value: Any, key: Any) -> SchemaError:
    """The error for text written into a binary field or bytes into a string field.

    One rule and one message for every path (``write`` and ``upsert`` of records,
    ``update``, Arrow data): pyarrow would decode the bytes as UTF-8, or encode the
    text, without a word, and an Arrow binary column never fitted a string field.
    """
    if text_kind(target) == "string":
        held, fix = "text (str)", "decode it (value.decode('utf-8'))"
    elif isinstance(target, pa.BaseExtensionType) and target.extension_name == "arrow.uuid":
        held, fix = "a uuid.UUID or its 16 bytes", "give uuid.UUID(value)"
    else:
        held, fix = "bytes", "encode it (value.encode('utf-8'))"
    if isinstance(value, memoryview):  # its repr shows an address, not the bytes
        shown = f"memoryview({show_value(bytes(value))})"
    else:
        shown = show_value(value)
    return SchemaError(
        f"field {name!r} is {target}, which holds {held}: the value {shown} "
        f"of the record with key {show_value(key)} is {type(value).__name__}. "
        f"Values are never converted between text and bytes: {fix}, or declare the "
        f"field schema-free (alter_schema(table, free=[{name!r}]))"
    )


def check_kind_column(
    name: str, column: Any, target: pa.DataType, key_of: Callable[[int], Any]
) -> None:
    """A binary column for a string field, or a string column for a binary one, is a
    :func:`kind_error` naming its first value (as a record's value would be)."""
    wanted = text_kind(target)
    held = text_kind(column.type)
    if wanted is None or held is None or held == wanted:
        return
    valid = pc.is_valid(column)
    position = pc.index(valid, True).as_py()
    if position is None or position < 0:
        return  # all null: nulls fit any field
    value = column.slice(position, 1).to_pylist()[0]
    raise kind_error(name, target, value, key_of(int(position)))
