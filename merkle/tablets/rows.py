"""Vectorised row operations on Arrow tables sorted by encoded key.

Everything here works on whole columns (Arrow compute and numpy): sorting a
bulk load, removing replaced and deleted rows, merging changes into a
tablet's rows, cutting rows into tablets. No per-row Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from merkle.tablets.keyindex import as_u64, combine
from merkle.tablets.keys import KeyCodec
from merkle.tablets.segment import concat_segments

__all__ = ["SortedRows", "cut_points", "empty_keys", "merge_changes", "sort_rows"]


@dataclass(frozen=True, slots=True)
class SortedRows:
    """Rows sorted by encoded key, unique, with the encoded keys beside them."""

    table: pa.Table
    keys: pa.Array  # encoded keys, same length and order as ``table``

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def slice(self, start: int, stop: int) -> SortedRows:
        return SortedRows(
            self.table.slice(start, stop - start), self.keys.slice(start, stop - start)
        )


def empty_keys(codec: KeyCodec) -> pa.Array:
    """An empty array of the codec's encoded-key type."""
    return codec.encode_array(pa.array([], type=codec.arrow_type))


def sort_rows(table: pa.Table, key_field: str, codec: KeyCodec) -> SortedRows:
    """Sort ``table`` by encoded key and keep only the last row written for each key."""
    encoded = combine(codec.encode_array(table.column(key_field)))
    if len(encoded) < 2:
        return SortedRows(table, encoded)
    words = as_u64(encoded)
    if words is not None:
        # Fixed 8-byte keys: the whole sort and dedupe in numpy.
        if bool(np.all(words[:-1] < words[1:])):
            return SortedRows(table, encoded)
        order = np.argsort(words)  # fast; fine while the keys are unique
        ordered = words[order]
        last_of_run = np.append(ordered[:-1] != ordered[1:], True)
        if not last_of_run.all():
            # Repeated keys: a stable sort keeps them in write order, so the last wins.
            order = np.argsort(words, kind="stable")
            ordered = words[order]
            last_of_run = np.append(ordered[:-1] != ordered[1:], True)
            order = order[last_of_run]
        indices = pa.array(order)
        return SortedRows(table.take(indices), encoded.take(indices))
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
