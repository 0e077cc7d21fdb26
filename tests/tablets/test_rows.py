"""sort_rows against a model: rows in encoded-key order, the last write of a key wins.

Every path is drawn: keys already in order, dense unique keys (placed, not
compared; spanning exactly their number or up to twice it), dense keys with
repeats, sparse unique keys, repeated keys, and codecs sorted as words (int,
float, timestamp), as 8-byte encodings (``reverse(int)``) or as bytes; the
input in one chunk or several; the words made a few rows at a time (as a
large load makes them) or all at once; and slices of the sorted rows, which
gather their rows and make their keys on their own. Then the memory a sort
holds: never the words of every row when it needs no comparison sort.
"""

from __future__ import annotations

import datetime
import itertools
import tracemalloc

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from merkle.tablets import rows as rows_module
from merkle.tablets.keys import key_codec
from merkle.tablets.rows import sort_rows

_INT = st.integers(-(2**63), 2**63 - 1)
_KEYS = {
    "int": st.one_of(st.integers(-50, 50), _INT),
    "reverse(int)": st.integers(-50, 50),
    "float": st.floats(allow_nan=False, allow_infinity=True, width=64),
    "timestamp": st.datetimes(
        min_value=datetime.datetime(1900, 1, 1), max_value=datetime.datetime(2200, 1, 1)
    ).map(lambda d: d.replace(tzinfo=datetime.UTC)),
    "str": st.text(max_size=6),
}


@settings(deadline=None, max_examples=300)
@given(
    data=st.data(),
    spec=st.sampled_from(sorted(_KEYS)),
    shape=st.sampled_from(["any", "sorted", "dense", "gaps", "dense repeats"]),
    chunks=st.integers(1, 3),
    step=st.sampled_from([1, 3, 7, rows_module._WORDS_STEP]),
)
def test_sort_rows_matches_a_model(
    data: st.DataObject, spec: str, shape: str, chunks: int, step: int
) -> None:
    default = rows_module._WORDS_STEP
    rows_module._WORDS_STEP = step  # runs of words that end inside the input
    try:
        _check_sort_rows(data, spec, shape, chunks)
    finally:
        rows_module._WORDS_STEP = default


def _check_sort_rows(data: st.DataObject, spec: str, shape: str, chunks: int) -> None:
    codec = key_codec(spec)
    if shape == "dense" and spec == "int":
        n = data.draw(st.integers(0, 40))
        keys = data.draw(st.permutations(list(range(1000, 1000 + n))))
    elif shape == "gaps" and spec == "int":
        n = data.draw(st.integers(0, 40))
        some = data.draw(st.sets(st.integers(1000, 1000 + 2 * n), min_size=n, max_size=n))
        keys = data.draw(st.permutations(sorted(some)))
    elif shape == "dense repeats" and spec == "int":
        keys = data.draw(st.lists(st.integers(1000, 1010), min_size=2, max_size=40))
    else:
        keys = data.draw(st.lists(_KEYS[spec], max_size=40))
        if shape == "sorted":
            keys = sorted(set(keys), key=lambda k: codec.encode(k))
    whole = pa.table({"id": codec.to_arrow(keys), "row": pa.array(range(len(keys)), pa.int64())})
    cuts = sorted(data.draw(st.lists(st.integers(0, len(keys)), max_size=chunks - 1)))
    bounds = [0, *cuts, len(keys)]
    table = pa.concat_tables([whole.slice(a, b - a) for a, b in itertools.pairwise(bounds)])
    rows = sort_rows(table, "id", codec)
    last: dict[bytes, int] = {}
    for i, key in enumerate(keys):
        last[codec.encode(key)] = i  # the last write wins
    expected = sorted(last.items())
    assert rows.keys.to_pylist() == [key for key, _ in expected]
    assert rows.table.column("row").to_pylist() == [i for _, i in expected]
    assert [codec.encode(k) for k in codec.to_python(rows.table.column("id"))] == [
        key for key, _ in expected
    ]
    # A slice taken before anything is gathered or encoded holds the same rows.
    a = data.draw(st.integers(0, len(expected)))
    b = data.draw(st.integers(a, len(expected)))
    part = sort_rows(table, "id", codec).slice(a, b)
    assert len(part) == b - a
    assert part.table.column("row").to_pylist() == [i for _, i in expected[a:b]]
    assert part.keys.to_pylist() == [key for key, _ in expected[a:b]]


def _peak_bytes_of_sorting(keys: np.ndarray) -> int:
    """The most bytes numpy held at once while sorting rows with these int keys."""
    table = pa.table({"id": pa.array(keys, pa.int64())})
    codec = key_codec("int")
    tracemalloc.start()
    try:
        rows = sort_rows(table, "id", codec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(rows) == len(keys)
    return peak


def test_a_sort_that_places_keys_never_holds_every_rows_words() -> None:
    """Found at 10M rows: the sort was the peak of a bulk load (126 MiB over the input,
    Lance's whole load 53 MiB), the order words of every row (8 bytes each)
    made at once beside the order (4 bytes each). Unique keys of a narrow range
    are placed with their words made a run at a time; keys already in order
    hold no order at all (and, when they are every word of their range, no
    words either)."""
    n = 4_000_000
    words_of_every_row = 8 * n
    shuffled = np.random.default_rng(7).permutation(n)
    peak = _peak_bytes_of_sorting(shuffled)
    assert 4 * n <= peak < words_of_every_row, peak  # the 4-byte order, little else
    assert _peak_bytes_of_sorting(np.arange(n)) < words_of_every_row // 4


def test_an_empty_slice_after_the_largest_int_key_has_no_keys() -> None:
    """Rows whose keys are every word of their range keep the words as a range; an empty
    slice at its end starts at 2**64 when the last key is the largest int64, which numpy
    cannot hold (an OverflowError, found by the model above)."""
    table = pa.table({"id": pa.array([2**63 - 1], pa.int64())})
    rows = sort_rows(table, "id", key_codec("int"))
    assert rows.slice(1, 1).keys.to_pylist() == []
    assert rows.slice(0, 1).keys.to_pylist() == [key_codec("int").encode(2**63 - 1)]
