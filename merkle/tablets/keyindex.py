"""Binary search over the sorted encoded keys of one tablet or batch.

Rows in a tablet are sorted by encoded key. Fixed-width 8-byte encodings
(int, float, timestamp) are searched as big-endian unsigned integers with
numpy, whose order equals the bytewise order; other encodings fall back to
``bisect`` over Python bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import pyarrow as pa

__all__ = [
    "ARRAY_OVERHEAD",
    "INDEX_OVERHEAD",
    "KeyIndex",
    "array_bytes",
    "as_u64",
    "combine",
    "words_binary",
]

#: What a cached key index holds besides its buffers: the index and its numpy array
#: objects, the cache's entry and key. Measured (RSS, pyarrow 26, numpy 2) with 50,000
#: indexes of one key each: ~1.4 KB apiece with its Arrow array, ~2 KB for int keys
#: (whose encodings keep numpy-backed buffers). Charged with :data:`ARRAY_OVERHEAD` so
#: that a cache of small indexes (one per small pending batch) stays within
#: ``cache_bytes``: charged its words only (8 bytes a key), such a cache of 1 MB held
#: ~31 MB.
INDEX_OVERHEAD = 1024
#: What an Arrow array keeps alive besides its buffers: the C++ array, its data and
#: buffer objects and the Python wrapper.
ARRAY_OVERHEAD = 768
#: A Python ``bytes`` object's header and the list's pointer to it (per key of a list).
_LISTED_KEY = 48


def array_bytes(array: pa.Array | pa.ChunkedArray) -> int:
    """The memory an Arrow array keeps alive, for the caches: its buffers whole (as a
    slice keeps them) plus :data:`ARRAY_OVERHEAD` per chunk. Not ``nbytes``, which
    counts only the bytes its rows reference."""
    chunks = array.num_chunks if isinstance(array, pa.ChunkedArray) else 1
    return int(array.get_total_buffer_size()) + ARRAY_OVERHEAD * max(1, chunks)


def combine(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array from a possibly chunked column."""
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def as_u64(array: pa.Array) -> np.ndarray | None:
    """Keys that are all exactly 8 bytes as native unsigned integers (same order), else None.

    Accepts ``fixed_size_binary(8)`` and plain ``binary`` arrays whose offsets
    advance by 8 (what the int, float and timestamp codecs produce).
    """
    if array.null_count or not len(array):
        return None
    n, start = len(array), array.offset
    if pa.types.is_fixed_size_binary(array.type) and array.type.byte_width == 8:
        first = start * 8
    elif pa.types.is_binary(array.type):
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1, offset=start * 4)
        if offsets[-1] - offsets[0] != 8 * n or not bool(np.all(np.diff(offsets) == 8)):
            return None
        first = int(offsets[0])
    else:
        return None
    data = array.buffers()[-1]
    return np.frombuffer(data, dtype=">u8", count=n, offset=first).astype(np.uint64)


def words_binary(words: np.ndarray) -> pa.Array:
    """The inverse of :func:`as_u64`: a binary array whose row i is the 8 big-endian
    bytes of ``words[i]``."""
    count = len(words)
    data = np.ascontiguousarray(words.astype(">u8"))
    offsets = np.arange(0, 8 * (count + 1), 8, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


class KeyIndex:
    """Sorted encoded keys with ``find`` (exact positions) and ``rank`` (insertion points)."""

    __slots__ = ("_encode", "_keys", "_list", "_u64", "nbytes")

    def __init__(self, encoded: pa.Array | pa.ChunkedArray) -> None:
        self._keys: pa.Array | None = combine(encoded)
        self._encode: Callable[[], pa.Array] | None = None
        self._u64 = as_u64(self._keys)
        self._list: list[bytes] | None = None
        #: The bytes this index keeps alive (its weight in the key-index cache).
        self.nbytes = INDEX_OVERHEAD + array_bytes(self._keys)
        if self._u64 is None:
            self._list = self._keys.to_pylist()
            self.nbytes += _LISTED_KEY * len(self._keys) + int(self._keys.get_total_buffer_size())
        else:
            self.nbytes += int(self._u64.nbytes)

    @classmethod
    def of_words(
        cls, words: np.ndarray, encode: Callable[[], pa.Array], *, holds: int = 0
    ) -> KeyIndex:
        """An index over 8-byte keys given as native unsigned words (``as_u64`` of the
        encodings); the binary encodings are made by ``encode`` only if asked for.

        A lookup or an existence check only searches the words, so building
        the binary array and reading it back (most of a page lookup's own
        time) is skipped. ``holds``: the bytes ``encode`` keeps alive (its source
        column: :func:`array_bytes`), counted in :attr:`nbytes` for the caches.
        """
        index = cls.__new__(cls)
        index._keys, index._encode, index._list = None, encode, None
        index._u64 = np.ascontiguousarray(words, dtype=np.uint64)
        index.nbytes = INDEX_OVERHEAD + int(index._u64.nbytes) + holds
        return index

    @classmethod
    def joined(cls, parts: Sequence[KeyIndex]) -> KeyIndex:
        """One index over consecutive runs of keys (the pages of a tablet, in order)."""
        words = [part._u64 for part in parts if part._u64 is not None]
        if parts and len(words) == len(parts):
            return cls.of_words(
                np.concatenate(words),
                lambda: pa.concat_arrays([part.keys for part in parts]),
                holds=sum(part.nbytes for part in parts),
            )
        return cls(pa.concat_arrays([part.keys for part in parts]))

    def __len__(self) -> int:
        return len(self._u64) if self._u64 is not None else len(self.keys)

    @property
    def keys(self) -> pa.Array:
        """The encoded keys as an Arrow array."""
        if self._keys is None:
            assert self._encode is not None
            self._keys, self._encode = combine(self._encode()), None
        return self._keys

    def key_at(self, i: int) -> bytes:
        """The ``i``-th key (0-based; negative counts from the end)."""
        if self._u64 is not None:
            return int(self._u64[i]).to_bytes(8, "big")
        key: bytes = self.keys[i].as_py()
        return key

    def _probe(self, keys: Sequence[bytes]) -> np.ndarray:
        if self._u64 is not None and all(len(k) == 8 for k in keys):
            return np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
        return np.empty(0)

    def rank(self, key: bytes, *, inclusive: bool = False) -> int:
        """How many keys are ``< key`` (``<= key`` with ``inclusive``)."""
        side: Literal["left", "right"] = "right" if inclusive else "left"
        probe = self._probe([key])
        if len(probe):
            assert self._u64 is not None
            return int(np.searchsorted(self._u64, probe[0], side=side))
        values = self._materialized()
        return (bisect.bisect_right if inclusive else bisect.bisect_left)(values, key)

    def find(self, keys: Sequence[bytes]) -> list[int]:
        """The row of each key, or -1 where the key is absent."""
        if not keys:
            return []
        probe = self._probe(keys)
        if len(probe):
            assert self._u64 is not None
            pos = np.searchsorted(self._u64, probe, side="left")
            inside = pos < len(self._u64)
            hit = np.zeros(len(probe), dtype=bool)
            hit[inside] = self._u64[pos[inside]] == probe[inside]
            return np.where(hit, pos, -1).tolist()  # type: ignore[no-any-return]
        values = self._materialized()
        found = []
        for key in keys:
            i = bisect.bisect_left(values, key)
            found.append(i if i < len(values) and values[i] == key else -1)
        return found

    def _materialized(self) -> list[bytes]:
        if self._list is None:
            self._list = self.keys.to_pylist()
        return self._list
