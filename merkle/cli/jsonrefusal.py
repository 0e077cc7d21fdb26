"""Which JSON Lines rows pyarrow refuses to read with given types, found in a few reads.

pyarrow's JSON reader names neither the row nor the field of a value it
cannot read with an explicit schema; the load's error messages
(:mod:`merkle.cli.readerrors`, :mod:`merkle.cli.inferred`) find them by reading
the lines again: the lines at once, then halves of a refused run, never one
read per line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.json as pajson

from merkle.cli.sources import BLOCK_SIZE, Input

__all__ = ["first_refused", "json_rows", "refusal"]

Unexpected = Literal["ignore", "error"]


def json_rows(path: str) -> Iterator[tuple[int, bytes]]:
    """The rows of the JSON Lines file at ``path`` read again from its start, with their
    1-based row numbers: non-blank lines, a byte order mark skipped, read a block at a
    time (decompressed, as the load read them)."""
    opened = Input(path)
    try:
        opened.skip_bom(path)
        row, carry = 0, b""
        while True:
            chunk = opened.stream.read(BLOCK_SIZE)
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop() if chunk else b""
            for line in lines:
                if line.strip():  # blank lines are no rows
                    row += 1
                    yield row, line
            if not chunk:
                return
    finally:
        opened.close()


def refusal(
    lines: Sequence[bytes], schema: pa.Schema, *, unexpected: Unexpected = "ignore"
) -> pa.ArrowException | None:
    """pyarrow's error reading the JSON ``lines`` with ``schema``, or None when it reads
    them (no lines: None). ``unexpected``: whether a member beyond the schema is
    ignored or refused."""
    if not lines:
        return None
    data = b"\n".join(lines)
    try:
        pajson.read_json(
            pa.BufferReader(data),
            read_options=pajson.ReadOptions(use_threads=False, block_size=len(data) + 1),
            parse_options=pajson.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior=unexpected
            ),
        )
    except pa.ArrowException as exc:
        return exc
    return None


def first_refused(
    lines: Sequence[bytes], schema: pa.Schema, *, unexpected: Unexpected = "ignore"
) -> int | None:
    """The position of the first of ``lines`` that :func:`refusal` refuses, found by
    halving (each row is read on its own, so a part holds it or not); None if none."""
    if refusal(lines, schema, unexpected=unexpected) is None:
        return None
    low, high = 0, len(lines)  # the first refused line is in lines[low:high]
    while high - low > 1:
        middle = (low + high) // 2
        if refusal(lines[low:middle], schema, unexpected=unexpected) is None:
            low = middle
        else:
            high = middle
    return low
