"""Pages: a tablet's rows cut into blocks of a few thousand rows, per family.

A version 2 tablet keeps its rows in *pages*. A page is a run of consecutive
rows (in key order) stored as one block holding the key column alone (the
*key block*) and one block per family holding that family's fields (the
``base`` family: every field in no other family). Blocks are segments
(:mod:`merkle.tablets.segment`: one Arrow IPC stream, one record batch, LZ4;
a key block of fixed-width keys uncompressed, see :func:`encode_page`),
row-aligned by position within the page. A family none of whose fields holds
a value in the page has no block there.

Pages make a point read cost one small block per family it needs, an
existence check one key block, and a write rewrite only the pages it
touches. The layout is doc/format.md, "Tablet".
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from merkle.errors import IntegrityError
from merkle.tablets.nodes import BASE
from merkle.tablets.segment import SEGMENT_CODEC, concat_segments, encode_segment

__all__ = [
    "KEYS",
    "check_counts",
    "concat_pages",
    "cut_pages",
    "encode_page",
    "join_page",
    "join_pages",
    "join_picked",
    "pick_page",
    "pick_rows",
    "split_page",
]

#: The slot of a page's key block beside its family blocks (never a family name:
#: family names are field-like strings, this one is not a valid field name).
KEYS = ""


def split_page(
    rows: pa.Table, key_field: str, families: Mapping[str, Sequence[str]]
) -> dict[str, pa.Table]:
    """A page's rows as its blocks' tables: the key column alone, then each family's fields.

    Families without a column in these rows are left out (they get no block).
    """
    owner = {f: name for name, members in families.items() for f in members}
    parts: dict[str, list[str]] = {}
    for name in rows.column_names:
        if name != key_field:
            parts.setdefault(owner.get(name, BASE), []).append(name)
    out = {KEYS: rows.select([key_field])}
    for family in [BASE, *sorted(families)]:
        if family in parts:
            out[family] = rows.select(parts[family])
    return out


def encode_page(
    rows: pa.Table, key_field: str, families: Mapping[str, Sequence[str]]
) -> list[tuple[str, pa.Table, bytes]]:
    """The blocks of one page: (slot, table, block bytes), the key block first.

    A key block of fixed-width keys (integers, dates, timestamps) is stored
    uncompressed: sorted keys give LZ4 a short match every few bytes, and
    decoding them was the slowest part of reading a page (12,500 int64 keys:
    155 us with LZ4 for half the bytes, 12 us without), paid by every
    lookup, every existence check of a commit and every scan.
    """
    return [
        (slot, table, encode_segment(table, compression=_key_block_codec(table, slot)))
        for slot, table in split_page(rows, key_field, families).items()
    ]


def _key_block_codec(table: pa.Table, slot: str) -> Any:
    """The IPC compression of one of a page's blocks (None: uncompressed)."""
    if slot == KEYS and pa.types.is_primitive(table.schema.field(0).type):
        return None
    return SEGMENT_CODEC


def check_counts(keys: pa.Table, parts: Mapping[str, pa.Table], count: int) -> None:
    """IntegrityError unless every block of a page holds the page's ``count`` rows."""
    if keys.num_rows != count or keys.num_columns != 1:
        raise IntegrityError(
            f"a key block holds {keys.num_rows} rows in {keys.num_columns} columns; "
            f"its page says {count} rows in one column"
        )
    for family, part in parts.items():
        if part.num_rows != count:
            raise IntegrityError(
                f"family {family!r} of a page holds {part.num_rows} rows, the page {count}: "
                "the blocks do not belong to one page"
            )


def join_page(keys: pa.Table, parts: Mapping[str, pa.Table], count: int) -> pa.Table:
    """The inverse of :func:`split_page`: the key column, then every field sorted by name."""
    check_counts(keys, parts, count)
    if not parts:
        return keys
    columns: dict[str, tuple[pa.Field, Any]] = {}
    for part in parts.values():
        for field, column in zip(part.schema, part.columns, strict=True):
            if field.name in columns or field.name == keys.column_names[0]:
                raise IntegrityError(f"field {field.name!r} appears twice in one page's blocks")
            columns[field.name] = (field, column)
    order = sorted(columns)
    return pa.Table.from_arrays(
        [keys.column(0), *(columns[name][1] for name in order)],
        schema=pa.schema([keys.schema.field(0), *(columns[name][0] for name in order)]),
    )


def join_pages(pages: Sequence[tuple[pa.Table, Mapping[str, pa.Table]]]) -> pa.Table | None:
    """The rows of consecutive pages (each: its key block's table and its families'),
    joined once: every family's pages concatenated, then :func:`join_page`.

    None when the pages do not agree (other families, or a family or key block
    with another schema): :func:`join_page` each and :func:`concat_pages` them.
    Every page's counts must have been checked (:func:`check_counts`).
    Zero-copy, like :func:`concat_pages` of pages that agree, and the same table.
    """
    first_keys, first_parts = pages[0]
    names = list(first_parts)
    for keys, parts in pages[1:]:
        if list(parts) != names or not keys.schema.equals(first_keys.schema, check_metadata=True):
            return None
        for name in names:
            if not parts[name].schema.equals(first_parts[name].schema, check_metadata=True):
                return None
    keys = pa.concat_tables([keys for keys, _ in pages])
    # A family none of whose columns is wanted is decoded to its row count alone,
    # which concatenation would lose: it adds no column, so it is left out here
    # (its counts were checked page by page).
    joined = {
        name: pa.concat_tables([parts[name] for _, parts in pages])
        for name in names
        if first_parts[name].num_columns
    }
    return join_page(keys, joined, keys.num_rows)


def concat_pages(tables: Sequence[pa.Table], key_field: str) -> pa.Table:
    """The rows of consecutive pages as one table (zero-copy when their schemas agree)."""
    if len(tables) == 1:
        return tables[0]
    first = tables[0].schema
    if all(table.schema.equals(first, check_metadata=True) for table in tables[1:]):
        return pa.concat_tables(tables)
    return concat_segments(tables, key_field=key_field)


#: Up to this many rows, :func:`pick_rows` slices instead of calling Arrow's take.
_FEW_ROWS = 8


def pick_rows(table: pa.Table, rows: Sequence[int]) -> pa.Table:
    """The rows at ascending positions ``rows`` of a table.

    A few rows are sliced out (zero-copy, and a point read then never loads
    Arrow's compute kernels, a noticeable part of a command's start); more
    are gathered with take.
    """
    if len(rows) > _FEW_ROWS:
        return table.take(pa.array(rows, type=pa.int64()))
    return pa.concat_tables([table.slice(row, 1) for row in rows])


def pick_page(
    keys: pa.Table, parts: Mapping[str, pa.Table], count: int, rows: Sequence[int]
) -> tuple[list[str], list[pa.Table]]:
    """The rows at ascending positions ``rows`` of a page's blocks, once every block is
    checked to hold the page's ``count`` rows (as :func:`join_page` checks them):
    the names of the families picked from (those with columns to read), then the
    key block's rows and each of those families'. A lookup picks a row or two of
    thousands, so it joins its picks, not the pages (:func:`join_picked`)."""
    check_counts(keys, parts, count)
    names = [family for family, part in parts.items() if part.num_columns]
    return names, [pick_rows(keys, rows), *(pick_rows(parts[family], rows) for family in names)]


def join_picked(picked: Sequence[tuple[list[str], list[pa.Table]]]) -> pa.Table:
    """One table of the rows picked from several pages (in order), each given as its
    family names and :func:`pick_page`'s tables: joined once when the pages agree
    on families and schemas (one join per page cost a 1,000-key lookup 60 ms at
    10M rows), else page by page and put under one schema."""
    names, first = picked[0]
    if all(
        other_names == names
        and all(t.schema.equals(f.schema) for t, f in zip(tables, first, strict=True))
        for other_names, tables in picked[1:]
    ):
        slots = [pa.concat_tables([tables[i] for _, tables in picked]) for i in range(len(first))]
        joined = join_page(slots[0], dict(zip(names, slots[1:], strict=True)), slots[0].num_rows)
        return joined.combine_chunks()
    key_field = first[0].column_names[0]
    return concat_segments(
        [
            join_page(tables[0], dict(zip(names, tables[1:], strict=True)), tables[0].num_rows)
            for names, tables in picked
        ],
        key_field=key_field,
    )


def cut_pages(counts: Sequence[int], limit: int, least: int) -> list[int] | None:
    """Page indexes that cut pages of ``counts`` rows into tablets of ``least..limit`` rows.

    The cuts (``[0, ..., len(counts)]``) fall on page boundaries, so every
    page is reused as it is. The fewest pieces are tried first; None when no
    cut at page boundaries keeps every piece within the bounds (pages too
    big for the tablet limit), and the rows must be re-cut.
    """
    total = sum(counts)
    if total <= limit:
        return [0, len(counts)]
    prefix = [0]
    for count in counts:
        prefix.append(prefix[-1] + count)
    for pieces in range(-(-total // limit), len(counts) + 1):
        cuts = [0]
        for i in range(1, pieces):
            target = i * total / pieces
            j = min(
                range(cuts[-1] + 1, len(counts)),
                key=lambda k: abs(prefix[k] - target),
                default=None,
            )
            if j is None:
                break
            cuts.append(j)
        cuts.append(len(counts))
        sizes = [prefix[b] - prefix[a] for a, b in itertools.pairwise(cuts)]
        if len(sizes) == pieces and all(least <= size <= limit for size in sizes):
            return cuts
    return None
