"""A segment's schema, read from the first bytes of its block (planning without data).

A segment is an Arrow IPC stream, so its block starts with the schema
message: planners (the Spark schema of a table, a projected decode) read
just those bytes, and the decoder learns once per distinct schema what it
checks and projects (:func:`segment_layout`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection

import pyarrow as pa

from merkle.errors import IntegrityError, UsageError
from merkle.tablets.storedform import storage_type

__all__ = ["SegmentLayout", "decode_segment_schema", "schema_message_size", "segment_layout"]


def schema_message_size(head: bytes) -> int:
    """How many leading bytes of a segment block hold its schema (from its first 8 bytes).

    A segment is an IPC stream, so its first message is the schema: a
    continuation marker, the metadata length, then the metadata. Planners
    read just these bytes to learn a segment's columns without its data.
    """
    if len(head) < 8 or head[:4] != b"\xff\xff\xff\xff":
        raise IntegrityError("block does not start like an Arrow IPC stream: not a segment")
    return 8 + int.from_bytes(head[4:8], "little")


def decode_segment_schema(head: bytes) -> pa.Schema:
    """The schema of a segment from the first :func:`schema_message_size` bytes of its block.

    These bytes are not hash-checked (only whole blocks can be): use the
    schema for planning, and read the block itself, verified, for data.
    """
    size = schema_message_size(head)
    if len(head) < size:
        raise UsageError(f"decode_segment_schema needs the first {size} bytes, got {len(head)}")
    try:
        message = pa.ipc.read_message(pa.BufferReader(pa.py_buffer(head[:size])))
        return pa.ipc.read_schema(message)
    except (pa.ArrowException, OSError, ValueError, EOFError) as exc:
        raise IntegrityError(
            f"segment schema does not decode: {exc or type(exc).__name__}"
        ) from None


class SegmentLayout:
    """What decoding a segment of one schema needs to know, worked out once per schema.

    Many blocks share a schema message byte for byte (every page of a
    table's family): its names are checked once, the string columns that
    are validated as bytes are found once, and a projection's field
    positions are computed once. Working these out for every block was a
    quarter of a small block's decode (about 45 of 180 us for a page of
    4,096 rows).
    """

    __slots__ = ("_projections", "older", "schema", "strings")

    def __init__(self, schema: pa.Schema) -> None:
        _check_names(schema)
        self.schema = schema
        #: Top-level string columns (position -> the binary type they are checked as).
        self.strings = _string_views(schema)
        #: Columns not in their storage type (name -> the field as it is stored now): the
        #: views and run-end encoding of segments written before that rule.
        self.older = _older_forms(schema)
        self._projections: dict[frozenset[str], tuple[list[int], dict[int, pa.DataType]]] = {}

    def projection(self, columns: Collection[str]) -> tuple[list[int], dict[int, pa.DataType]]:
        """The positions of the fields named in ``columns`` (segment order), and the string
        views of the projected table by its own positions."""
        key = frozenset(columns)
        found = self._projections.get(key)
        if found is None:
            wanted = [i for i, field in enumerate(self.schema) if field.name in key]
            views = {n: self.strings[i] for n, i in enumerate(wanted) if i in self.strings}
            found = self._projections[key] = (wanted, views)
        return found


_LAYOUTS: dict[bytes, SegmentLayout] = {}
_LAYOUTS_HELD = 1024  # distinct schemas held; a lake has a few per table
_LAYOUTS_LOCK = threading.Lock()


def segment_layout(data: bytes | bytearray | memoryview) -> SegmentLayout:
    """The layout of a segment block's schema (IntegrityError when it is not one).

    Cached by the exact bytes of the schema message, so a layout is a
    function of those bytes alone; a schema that fails its checks is not
    cached.
    """
    head = bytes(data[: schema_message_size(bytes(data[:8]))])
    layout = _LAYOUTS.get(head)
    if layout is None:
        try:
            layout = SegmentLayout(decode_segment_schema(head))
        except IntegrityError as exc:
            raise IntegrityError(
                f"block of {len(data)} bytes is not a valid segment: {exc}"
            ) from None
        except (ValueError, pa.ArrowException) as exc:  # UnicodeDecodeError too
            raise IntegrityError(
                f"block of {len(data)} bytes is not a valid segment: its schema is not valid: {exc}"
            ) from None
        with _LAYOUTS_LOCK:
            if len(_LAYOUTS) >= _LAYOUTS_HELD:
                _LAYOUTS.clear()
            _LAYOUTS[head] = layout
    return layout


def _check_names(schema: pa.Schema) -> None:
    """Column names are distinct and non-empty; every field name, nested too, is UTF-8
    (ValueError, or UnicodeDecodeError, otherwise)."""
    names = schema.names  # UnicodeDecodeError if one is not UTF-8
    if len(set(names)) != len(names) or "" in names:
        raise ValueError(f"column names must be distinct and non-empty, found {names!r:.200}")
    stack = list(schema)
    while stack:
        field = stack.pop()
        _ = field.name
        kind = field.type
        stack.extend(kind.field(i) for i in range(kind.num_fields))


def _older_forms(schema: pa.Schema) -> dict[str, pa.Field]:
    """The fields of a segment schema not in their storage type, as they would be stored
    now (name, nullability and metadata kept).

    Segments hold every field in its storage type (doc/format.md, "Segments"),
    but writers before that rule stored string and binary views and run-end
    encoding as given, at any depth (a ``list<string_view>``, a struct member).
    Arrow has no take kernel for them, so a decoder gives such columns in the
    storage type, and every read, merge and rewrite of old segments works as on
    new ones. Empty for every segment written since.
    """
    older: dict[str, pa.Field] = {}
    for field in schema:
        stored = storage_type(field.type)
        if stored != field.type:
            older[field.name] = field.with_type(stored)
    return older


def _string_views(schema: pa.Schema) -> dict[int, pa.DataType]:
    views: dict[int, pa.DataType] = {}
    for i, field in enumerate(schema):
        if pa.types.is_string(field.type):
            views[i] = pa.binary()
        elif pa.types.is_large_string(field.type):
            views[i] = pa.large_binary()
    return views
