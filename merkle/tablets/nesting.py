"""How deeply a typed field's Arrow type may nest: Arrow IPC's limit, checked up front.

Segments are Arrow IPC streams, and Arrow's IPC writer and reader refuse a
column whose arrays nest more than 64 deep (``kMaxNestingDepth``; the error is
"Max recursion depth reached"): the column's own array and 63 levels of
child arrays under it. A list (``list``, ``large_list``, ``fixed_size_list``,
``list_view``), a struct or a run-end encoding (any type with children)
adds one level, a map two (its entries are a list of structs); a dictionary
or an extension type adds none. A field whose type nests deeper is refused when it is declared,
added or learned from a write (:func:`check_nesting`), before any value is
taken: written, it failed only at commit, and past a few hundred levels the
recursive type walks of a write died of a bare RecursionError first.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from merkle.blocks.nesting import MAX_CBOR_DEPTH
from merkle.errors import SchemaError

__all__ = ["ARROW_MAX_NESTING", "FREE_ARROW_MAX_NESTING", "check_nesting", "nesting_of"]

#: The most levels of child types a field's type may have under it (Arrow IPC's
#: ``kMaxNestingDepth`` of 64 arrays, less the column's own).
ARROW_MAX_NESTING: Final = 63

#: The most levels Arrow data may nest into a schema-free field (stored as CBOR, which
#: keeps up to 400): its values are turned into Python objects by pyarrow's
#: ``to_pylist``, which recurses about 2.5 interpreter frames a level and hits
#: Python's recursion limit near 350 levels; 200 leaves the caller's stack room.
#: Records (Python values) nest up to the CBOR limit.
FREE_ARROW_MAX_NESTING: Final = 200


def nesting_of(kind: pa.DataType, stop: int = ARROW_MAX_NESTING + 1) -> int:
    """The levels of child types under ``kind`` as Arrow IPC counts them, counted up to
    ``stop`` (a type nested thousands deep is not walked to its end).

    Iterative, so that a type of any depth is measured without recursion.
    """
    deepest = 0
    pending = [(kind, 0)]
    while pending:
        kind, depth = pending.pop()
        while True:  # an extension type or a dictionary is its storage or values
            if isinstance(kind, pa.BaseExtensionType):
                kind = kind.storage_type
            elif pa.types.is_dictionary(kind):
                kind = kind.value_type
            else:
                break
        if depth > deepest:
            deepest = depth
            if deepest >= stop:
                return deepest
        pending.extend((kind.field(i).type, depth + 1) for i in range(kind.num_fields))
    return deepest


def check_nesting(kind: pa.DataType, name: str, where: str, *, free: bool = False) -> None:
    """SchemaError naming field ``name`` (declared, added or learned from ``where``) when
    its type ``kind`` nests deeper than Arrow IPC stores (:data:`ARROW_MAX_NESTING`), or,
    for a schema-free field (``free``: its values are stored as CBOR), deeper than Arrow
    data may nest into one (:data:`FREE_ARROW_MAX_NESTING`)."""
    limit = FREE_ARROW_MAX_NESTING if free else ARROW_MAX_NESTING
    depth = nesting_of(kind, limit + 1)
    if depth <= limit:
        return
    shown = str(kind)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if free:
        raise SchemaError(
            f"{where}: schema-free field {name!r} is {shown}, whose type nests more than "
            f"{FREE_ARROW_MAX_NESTING} levels deep, the most Arrow data may nest into a "
            "schema-free field (its values pass through Python): flatten the field, or "
            f"write its values as records (they may nest up to {MAX_CBOR_DEPTH} levels)"
        )
    raise SchemaError(
        f"{where}: field {name!r} is {shown}, whose type nests more than "
        f"{ARROW_MAX_NESTING} levels deep (each list or struct is a level, a map two): "
        f"Arrow's IPC format, which merkle-db stores tablets in, holds at most "
        f"{ARROW_MAX_NESTING} levels under a column. Flatten the field, or keep it "
        f"schema-free (merkle.free_field({name!r}) in the schema, or "
        f"alter_schema(table, free=[{name!r}])) and write its values as records: CBOR "
        f"keeps them up to {MAX_CBOR_DEPTH} levels deep"
    )
