"""Sets of encoded keys as sorted, disjoint half-open ranges ``[lo, hi)``.

Key filters (``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``, ``BETWEEN`` and their
conjunction) all become such a set: because encoded keys compare as bytes,
the smallest key after ``k`` is ``k + b"\\x00"``, so every bound is a
half-open one (``<= k`` is ``< k + b"\\x00"``, ``> k`` is ``>= k + b"\\x00"``).
Bulk readers use the set to skip tablets whose key range misses it and to cut
the rows they read down to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from merkle.tablets.keyindex import KeyIndex, combine

__all__ = ["KeyRanges", "successor"]

Bound = bytes | None


def successor(key: bytes) -> bytes:
    """The smallest encoded key greater than ``key``."""
    return key + b"\x00"


def _below(a: Bound, b: Bound, *, a_is_hi: bool, b_is_hi: bool) -> bool:
    """``a < b`` where None is minus infinity for a lower bound, plus infinity for an upper."""
    if a is None:
        return not a_is_hi and (b is not None or b_is_hi)
    if b is None:
        return b_is_hi
    return a < b


@dataclass(frozen=True)
class KeyRanges:
    """Sorted, disjoint, non-empty ranges ``[lo, hi)`` of encoded keys (None: unbounded).

    ``KeyRanges.everything()`` holds every key, ``KeyRanges(())`` none. Values
    are plain bytes and tuples, so a set pickles to another process.
    """

    ranges: tuple[tuple[Bound, Bound], ...]

    # -- construction ------------------------------------------------------------

    @classmethod
    def everything(cls) -> KeyRanges:
        return cls(((None, None),))

    @classmethod
    def nothing(cls) -> KeyRanges:
        return cls(())

    @classmethod
    def between(cls, lo: Bound, hi: Bound) -> KeyRanges:
        """The keys ``lo <= k < hi`` (either bound None: unbounded)."""
        if lo is not None and hi is not None and lo >= hi:
            return cls.nothing()
        return cls(((lo, hi),))

    @classmethod
    def points(cls, keys: Iterable[bytes]) -> KeyRanges:
        """Exactly the given keys."""
        return cls.union_of(cls.between(k, successor(k)) for k in sorted(set(keys)))

    @classmethod
    def union_of(cls, sets: Iterable[KeyRanges]) -> KeyRanges:
        pieces = sorted(
            (r for s in sets for r in s.ranges),
            key=lambda r: (r[0] is not None, r[0] or b""),
        )
        merged: list[tuple[Bound, Bound]] = []
        for lo, hi in pieces:
            if merged:
                last_lo, last_hi = merged[-1]
                # Overlapping or touching: extend the previous range.
                if last_hi is None or (lo is not None and lo <= last_hi):
                    if last_hi is not None and (hi is None or hi > last_hi):
                        merged[-1] = (last_lo, hi)
                    continue
            merged.append((lo, hi))
        return cls(tuple(merged))

    def intersect(self, other: KeyRanges) -> KeyRanges:
        out: list[tuple[Bound, Bound]] = []
        for a_lo, a_hi in self.ranges:
            for b_lo, b_hi in other.ranges:
                lo = b_lo if _below(a_lo, b_lo, a_is_hi=False, b_is_hi=False) else a_lo
                hi = a_hi if _below(a_hi, b_hi, a_is_hi=True, b_is_hi=True) else b_hi
                if _below(lo, hi, a_is_hi=False, b_is_hi=True):
                    out.append((lo, hi))
        return KeyRanges.union_of([KeyRanges(tuple(out))])

    # -- questions ---------------------------------------------------------------

    @property
    def is_everything(self) -> bool:
        return self.ranges == ((None, None),)

    @property
    def is_empty(self) -> bool:
        return not self.ranges

    def overlaps(self, lo: Bound, hi: Bound) -> bool:
        """Whether any key in ``[lo, hi)`` is in the set."""
        return not self.intersect(KeyRanges.between(lo, hi)).is_empty

    def covers(self, lo: Bound, hi: Bound) -> bool:
        """Whether every key in ``[lo, hi)`` is in the set."""
        for r_lo, r_hi in self.ranges:
            starts = r_lo is None or (lo is not None and r_lo <= lo)
            ends = r_hi is None or (hi is not None and hi <= r_hi)
            if starts and ends:
                return True
        return False

    def select(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array | None:
        """Row positions of the sorted encoded ``keys`` that are in the set (None: all)."""
        index = KeyIndex(combine(keys))
        n = len(index)
        if self.covers(None, None):
            return None
        spans: list[tuple[int, int]] = []
        for lo, hi in self.ranges:
            start = 0 if lo is None else index.rank(lo)
            stop = n if hi is None else index.rank(hi)
            if stop > start:
                spans.append((start, stop))
        if spans == [(0, n)]:
            return None
        if not spans:
            return pa.array([], type=pa.int64())
        return pa.array(np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans]))
