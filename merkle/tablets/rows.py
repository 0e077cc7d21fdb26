"""Vectorised row operations on Arrow tables sorted by encoded key.

Everything here works on whole columns (Arrow compute and numpy): sorting a
bulk load, removing replaced and deleted rows, merging changes into a
tablet's rows, cutting rows into tablets. No per-row Python.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from merkle.lazy import compute as pc
from merkle.tablets.keyindex import as_u64, combine, words_binary
from merkle.tablets.keys import KeyCodec
from merkle.tablets.segment import concat_segments

__all__ = ["SortedRows", "cut_points", "empty_keys", "merge_changes", "sort_rows"]


class SortedRows:
    """Rows sorted by encoded key, unique, with the encoded keys beside them.

    The rows may be held as a table plus a permutation (``order``) that is
    applied only when ``table`` is first read: slicing such rows slices the
    permutation, so a bulk load gathers each tablet's rows in the worker that
    encodes it, on every core, instead of gathering the whole table first.
    """

    __slots__ = ("_materialized", "_order", "_source", "keys")

    def __init__(self, table: pa.Table, keys: pa.Array, order: np.ndarray | None = None) -> None:
        self._source = table
        self._order = order
        self._materialized: pa.Table | None = table if order is None else None
        self.keys = keys  # encoded keys, same length and order as the rows

    @property
    def table(self) -> pa.Table:
        """The rows in key order (gathered on first use)."""
        if self._materialized is None:
            assert self._order is not None
            self._materialized = self._source.take(pa.array(self._order))
        return self._materialized

    def __len__(self) -> int:
        return len(self.keys)

    def slice(self, start: int, stop: int) -> SortedRows:
        length = stop - start
        if self._materialized is not None:
            return SortedRows(
                self._materialized.slice(start, length), self.keys.slice(start, length)
            )
        assert self._order is not None
        return SortedRows(self._source, self.keys.slice(start, length), self._order[start:stop])


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
    words = codec.order_words(column)
    if words is not None:
        return _sort_words(table, words)
    encoded = combine(codec.encode_array(column))
    if len(encoded) < 2:
        return SortedRows(table, encoded)
    words = as_u64(encoded)  # other codecs whose keys happen to be 8 bytes
    if words is not None:
        return _sort_words(table, words)
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


def _sort_words(table: pa.Table, words: np.ndarray) -> SortedRows:
    """:func:`sort_rows` of fixed 8-byte keys given as words: the whole sort and dedupe
    in numpy, the encoded keys made once, in key order."""
    if len(words) < 2 or bool(np.all(words[:-1] < words[1:])):
        return SortedRows(table, words_binary(words))  # in key order: nothing to move
    order = _dense_order(words)
    if order is not None:  # unique keys in a narrow range: placed, not compared
        return SortedRows(table, words_binary(words[order]), order)
    order = np.argsort(words)  # fast; fine while the keys are unique
    ordered = words[order]
    last_of_run = np.append(ordered[:-1] != ordered[1:], True)
    if not last_of_run.all():
        # Repeated keys: a stable sort keeps them in write order, so the last wins.
        order = np.argsort(words, kind="stable")
        ordered = words[order]
        last_of_run = np.append(ordered[:-1] != ordered[1:], True)
        order, ordered = order[last_of_run], ordered[last_of_run]
    # The rows are gathered lazily (see SortedRows); the keys are cheap to make now.
    return SortedRows(table, words_binary(ordered), order)


def _dense_order(words: np.ndarray) -> np.ndarray | None:
    """The sorting permutation of unique keys spanning at most twice their number, by
    placing each at its offset from the smallest (a counting sort: linear, where a
    comparison sort is n log n); None for sparse or repeated keys."""
    n = len(words)
    low = words.min()
    span = int(words.max() - low) + 1
    if span > 2 * n:
        return None
    slots = np.full(span, -1, dtype=np.int64)
    slots[(words - low).astype(np.int64)] = np.arange(n, dtype=np.int64)
    order = slots[slots >= 0] if span > n else slots
    return order if len(order) == n and (span > n or bool((order >= 0).all())) else None


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
