"""Vectorised row operations on Arrow tables sorted by encoded key.

Everything here works on whole columns (Arrow compute and numpy): sorting a
bulk load, removing replaced and deleted rows, merging changes into a
tablet's rows, cutting rows into tablets. No per-row Python.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from merkle.lazy import compute as pc
from merkle.tablets.keyindex import as_u64, combine, words_binary
from merkle.tablets.keys import KeyCodec
from merkle.tablets.segment import concat_segments

__all__ = ["SortedRows", "cut_points", "empty_keys", "gather", "merge_changes", "sort_rows"]


class SortedRows:
    """Rows sorted by encoded key, unique, with the encoded keys beside them.

    The rows may be held as a table plus a permutation (``order``) that is
    applied only when ``table`` is first read: slicing such rows slices the
    permutation, so a bulk load gathers each tablet's rows in the worker that
    encodes it, on every core, instead of gathering the whole table first.
    Fixed 8-byte keys may likewise be held as their order words (``words``;
    a ``range`` for keys that are every word from the first to the last),
    made into encoded keys only when ``keys`` is first read: a bulk load makes
    each tablet's keys in its worker and never holds all of them at once.
    """

    __slots__ = ("_keys", "_materialized", "_order", "_source", "_words")

    def __init__(
        self,
        table: pa.Table,
        keys: pa.Array | None = None,
        order: np.ndarray | None = None,
        *,
        words: np.ndarray | range | None = None,
    ) -> None:
        assert keys is not None or words is not None, "give the keys or their words"
        self._source = table
        self._order = order
        self._materialized: pa.Table | None = table if order is None else None
        self._keys = keys
        self._words = words

    @property
    def keys(self) -> pa.Array:
        """The encoded keys, same length and order as the rows (made on first use)."""
        if self._keys is None:
            words = self._words
            assert words is not None
            if isinstance(words, range):  # an empty one may start past the last word, 2**64
                start = np.uint64(words.start if len(words) else 0)
                words = np.arange(len(words), dtype=np.uint64) + start
            self._keys = words_binary(words)
        return self._keys

    @property
    def table(self) -> pa.Table:
        """The rows in key order (gathered on first use)."""
        if self._materialized is None:
            assert self._order is not None
            self._materialized = gather(self._source, self._order)
        return self._materialized

    def __len__(self) -> int:
        return len(self._keys) if self._keys is not None else len(self._words)  # type: ignore[arg-type]

    def slice(self, start: int, stop: int) -> SortedRows:
        length = stop - start
        keys = None if self._keys is None else self._keys.slice(start, length)
        words = None if keys is not None or self._words is None else self._words[start:stop]
        if self._materialized is not None:
            return SortedRows(self._materialized.slice(start, length), keys, words=words)
        assert self._order is not None
        return SortedRows(self._source, keys, self._order[start:stop], words=words)


def gather(table: pa.Table, order: np.ndarray) -> pa.Table:
    """``table.take(order)``, without concatenating columns of several chunks.

    Arrow's take concatenates such a column on every call: a bulk load
    gathering one tablet at a time copied the whole column per tablet (~100
    MB and 30 ms at 10M rows), and combining the chunks once instead held a
    second copy of the input (every column of an input read from files has
    several chunks). Each chunk is taken from here with the row numbers that
    fall in it, and the parts put in order.
    """
    columns = []
    for column in table.columns:
        if column.num_chunks == 1:
            columns.append(column.chunk(0).take(order))
            continue
        bounds = np.cumsum([0, *(len(chunk) for chunk in column.chunks)])
        which = np.searchsorted(bounds, order, side="right") - 1
        picked = [np.flatnonzero(which == c) for c in range(column.num_chunks)]
        parts = [
            chunk.take(order[rows] - bounds[c])
            for c, (chunk, rows) in enumerate(zip(column.chunks, picked, strict=True))
            if len(rows)
        ]
        placed = np.empty(len(order), dtype=np.int64)
        placed[np.concatenate(picked)] = np.arange(len(order))
        joined = pa.concat_arrays(parts) if parts else column.chunk(0).slice(0, 0)
        columns.append(joined.take(placed))
    return pa.Table.from_arrays(columns, schema=table.schema)


@functools.cache
def _no_keys() -> pa.Array:
    # Made on first use: pa.array at import time would import pandas (pyarrow looks
    # for pandas objects), a fifth of a second at every command's start.
    return pa.array([], type=pa.binary())


def empty_keys(codec: KeyCodec) -> pa.Array:
    """An empty array of the codec's encoded-key type (``binary`` for every codec)."""
    return _no_keys()


def sort_rows(table: pa.Table, key_field: str, codec: KeyCodec) -> SortedRows:
    """Sort ``table`` by encoded key and keep only the last row written for each key."""
    column = table.column(key_field)
    # int, float and timestamp keys are sorted as words, never made into bytes first
    if len(column) and codec.order_words(column.slice(0, 1)) is not None:

        def chunks() -> Iterator[tuple[int, np.ndarray]]:
            for start in range(0, len(column), _WORDS_STEP):
                words = codec.order_words(column.slice(start, _WORDS_STEP))
                assert words is not None  # as for the first row: the codec has words
                yield start, words

        return _sort_words(table, len(column), chunks, lambda: codec.order_words(column))
    encoded = combine(codec.encode_array(column))
    if len(encoded) < 2:
        return SortedRows(table, encoded)
    words = as_u64(encoded)  # other codecs whose keys happen to be 8 bytes
    if words is not None:
        whole = words
        return _sort_words(table, len(whole), lambda: _steps(whole), lambda: whole)
    n = len(encoded)
    if pc.all(pc.less(encoded.slice(0, n - 1), encoded.slice(1))).as_py():
        return SortedRows(table, encoded)
    order = pc.sort_indices(encoded)  # Arrow's sort is stable too
    table, encoded = table.take(order), encoded.take(order)
    keep = pa.concat_arrays(
        [pc.not_equal(encoded.slice(0, n - 1), encoded.slice(1)), pa.array([True])]
    )
    if not pc.all(keep).as_py():
        table, encoded = table.filter(keep), encoded.filter(keep)
    return SortedRows(table, encoded)


#: Rows whose order words a sort makes (or places) at once: 256K rows make 2 MB of
#: words and about 6 MB of temporaries beside them.
_WORDS_STEP = 1 << 18
#: The order words of a sort's rows, a run at a time: (first row, words).
_Chunks = Callable[[], Iterator[tuple[int, np.ndarray]]]


def _steps(words: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    for start in range(0, len(words), _WORDS_STEP):
        yield start, words[start : start + _WORDS_STEP]


def _sort_words(
    table: pa.Table, n: int, chunks: _Chunks, whole: Callable[[], np.ndarray | None]
) -> SortedRows:
    """:func:`sort_rows` of fixed 8-byte keys given as order words: the whole sort and
    dedupe in numpy; the rows and their encoded keys are made later, a tablet at a time.

    The words are made a run at a time (``chunks``) to learn their range and
    whether they are in order, and again to place unique keys of a narrow
    range (a counting sort); only a comparison sort, or input in order whose
    keys are not every word of their range, takes the words of every row at
    once (``whole``). Making them whole first made the sort the peak of a
    bulk load (at 10M rows 126 MiB over the input: 80 MB of words beside the
    40 MB order; Lance's whole load peaks at 53 MiB).
    """
    low = high = previous = None
    ascending = True
    for _, words in chunks():
        least, most = int(words.min()), int(words.max())
        low = least if low is None else min(low, least)
        high = most if high is None else max(high, most)
        if ascending:
            ascending = bool(np.all(words[:-1] < words[1:])) and (
                previous is None or int(words[0]) > previous
            )
        previous = int(words[-1])
    assert low is not None  # at least one row
    assert high is not None
    span = high - low + 1
    if ascending:  # in key order: nothing to move
        return SortedRows(table, words=range(low, high + 1) if span == n else whole())
    dense = _dense_order(chunks, n, low, span) if span <= 2 * n else None
    if dense is not None:  # unique keys in a narrow range: placed, not compared
        order, ordered = dense
        return SortedRows(table, None, order, words=ordered)
    every = whole()
    assert every is not None
    order = np.argsort(every)  # fast; fine while the keys are unique
    ordered = every[order]
    last_of_run = np.append(ordered[:-1] != ordered[1:], True)
    if not last_of_run.all():
        # Repeated keys: a stable sort keeps them in write order, so the last wins.
        order = np.argsort(every, kind="stable")
        ordered = every[order]
        last_of_run = np.append(ordered[:-1] != ordered[1:], True)
        order, ordered = order[last_of_run], ordered[last_of_run]
    return SortedRows(table, None, _narrow(order), words=ordered)


def _narrow(order: np.ndarray) -> np.ndarray:
    """Row numbers as 32-bit integers where they fit: half the memory a load holds."""
    return order.astype(np.int32) if len(order) < 2**31 else order


def _dense_order(
    chunks: _Chunks, n: int, low: int, span: int
) -> tuple[np.ndarray, np.ndarray | range] | None:
    """The sorting permutation and the sorted words of ``n`` unique keys whose words
    span ``span`` (at most twice their number) from ``low``, by placing each at its
    offset (a counting sort: linear, where a comparison sort is n log n; the sorted
    words are the occupied offsets, never gathered); None for repeated keys."""
    index = np.dtype(np.int32 if n < 2**31 else np.int64)
    slots: np.ndarray = np.full(span, -1, dtype=index)
    base = np.uint64(low)
    for start, words in chunks():
        slots[words - base] = np.arange(start, start + len(words), dtype=index)
    if span == n:
        if int(slots.min()) < 0:
            return None  # a repeated key left a slot empty
        return slots, range(low, low + n)  # every word: made a tablet at a time
    occupied = np.flatnonzero(slots >= 0)
    if len(occupied) != n:
        return None
    return slots[occupied], occupied.astype(np.uint64) + base


def merge_changes(
    base: SortedRows,
    upserts: SortedRows,
    deletes: pa.Array,
    key_field: str,
) -> SortedRows:
    """``base`` with ``upserts`` replacing or adding rows and ``deletes`` removing them."""
    if not len(upserts) and not len(deletes):
        return base
    touched = pa.concat_arrays([upserts.keys, deletes.cast(upserts.keys.type)])
    keep = pc.invert(pc.is_in(base.keys, value_set=touched))
    kept = SortedRows(base.table.filter(keep), base.keys.filter(keep))
    if not len(upserts):
        return kept
    if not len(kept):
        return upserts
    table = concat_segments([kept.table, upserts.table], key_field=key_field)
    keys = pa.concat_arrays([kept.keys, upserts.keys])
    order = pc.sort_indices(keys)
    return SortedRows(table.take(order), keys.take(order))


def cut_points(n: int, limit: int) -> list[int]:
    """Boundaries that cut ``n`` rows into the fewest even pieces of at most ``limit``."""
    if n <= 0:
        return [0]
    pieces = max(1, math.ceil(n / limit))
    return [round(i * n / pieces) for i in range(pieces + 1)]


def concat_sorted(parts: Sequence[SortedRows], key_field: str) -> SortedRows:
    """Concatenate runs that are already in key order relative to each other."""
    parts = [p for p in parts if len(p)]
    if len(parts) == 1:
        return parts[0]
    table = concat_segments([p.table for p in parts], key_field=key_field)
    return SortedRows(table, pa.concat_arrays([p.keys for p in parts]))
