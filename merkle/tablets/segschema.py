"""A segment's schema, read from the first bytes of its block (planning without data).

A segment is an Arrow IPC stream, so its block starts with the schema
message: planners (the Spark schema of a table, a projected decode) read
just those bytes.
"""

from __future__ import annotations

import pyarrow as pa

from merkle.errors import IntegrityError, UsageError

__all__ = ["decode_segment_schema", "schema_message_size"]


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
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise IntegrityError(f"segment schema does not decode: {exc}") from None
