"""Work bounded by what is read: limited scans over a large pending area, and ``merkle diff``.

A scan with ``from_pk`` (or ``to_pk`` and ``reverse``) and a ``limit`` folded
every pending change from its bound to the end of the table, whatever the
limit: keyset pagination through the pending area was quadratic. A scan now
folds the pending area in key windows that grow until the limit is filled;
the tests count the pending entries folded (a hook on ``batch.fold``) and
compare every answer with a model, with windows of a few keys so that every
scan crosses many of them. ``merkle diff --format jsonl`` (and json, csv)
built every changed record before printing the first; the tests check that
records are printed while change sets are still being read, that the bytes
are what the listed rows print, and the Python memory peak.
"""

from __future__ import annotations

import io
import json
import random
import tracemalloc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

import merkle
from merkle.cli import output
from merkle.cli.main import cli
from merkle.db import diff as db_diff
from merkle.tablets import batch

from .helpers import model_scan

KEY = "k"
#: Keys ``0, 2, ..., 2 * (MERGED - 1)`` are in tablets; the pending tail starts at TAIL.
MERGED = 20_000
TAIL = 2 * MERGED
PENDING_TAIL = 100_000


class Folds:
    """Every fold of pending batches made while installed: the entries folded each time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        real = batch.fold

        def counting(contents: Sequence[batch.BatchContent], *args: Any) -> batch.BatchContent:
            self.sizes.append(sum(content.count for content in contents))
            return real(contents, *args)

        monkeypatch.setattr(batch, "fold", counting)

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def reset(self) -> None:
        self.sizes.clear()


@pytest.fixture
def big() -> Iterator[tuple[merkle.Database, dict[int, dict[str, Any]]]]:
    """A table of MERGED records in tablets and a large pending area (a tail of
    PENDING_TAIL new keys above them, deletes, patches and overwrites among them, in
    several batches), built in a few column writes; and a model of its records."""
    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key=KEY, patch_limit=10**9).commit()
    merged = np.arange(0, TAIL, 2, dtype=np.int64)
    db = db.write("t", pa.table({KEY: merged, "v": merged})).commit()
    db = db.compact("t").commit()
    assert not db.describe_table("t")["patch"]["count"]
    tail = np.arange(TAIL, TAIL + PENDING_TAIL, dtype=np.int64)
    db = db.write("t", pa.table({KEY: tail, "v": tail})).commit()
    over = np.arange(1, TAIL, 4, dtype=np.int64)  # new keys between the merged ones
    db = db.write("t", pa.table({KEY: over, "v": -over})).commit()
    gone = [int(k) for k in range(0, TAIL, 10)] + [TAIL + 3 * i for i in range(500)]
    db = db.delete("t", gone).commit()
    db = db.update("t", {TAIL + 7 * i + 1: {"w": i} for i in range(600)}).commit()
    model: dict[int, dict[str, Any]] = {int(k): {KEY: int(k), "v": int(k)} for k in merged}
    model.update({int(k): {KEY: int(k), "v": int(k)} for k in tail})
    model.update({int(k): {KEY: int(k), "v": -int(k)} for k in over})
    for k in gone:
        model.pop(k, None)
    for i in range(600):
        if TAIL + 7 * i + 1 in model:
            model[TAIL + 7 * i + 1]["w"] = i
    assert db.describe_table("t")["patch"]["count"] > PENDING_TAIL
    yield db, model
    conn.close()


def _keys(rows: Iterator[dict[str, Any]]) -> list[int]:
    return [row[KEY] for row in rows]


def _expect(model: dict[int, dict[str, Any]], **options: Any) -> list[int]:
    return [row[KEY] for row in model_scan(model, KEY, **options)]


def test_limited_scan_from_a_key_folds_about_its_rows(
    big: tuple[merkle.Database, dict[int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, model = big
    folds = Folds(monkeypatch)
    for start in (TAIL, TAIL + 50_000, 1_001):
        folds.reset()
        rows = list(db.scan("t", from_pk=start, limit=10))
        assert rows == model_scan(model, KEY, from_pk=start, limit=10)
        # Before: every pending change from `start` to the end (60,000 to 112,000).
        assert 0 < folds.total <= 10_000, (start, folds.sizes)


def test_reverse_limited_scan_to_a_key_folds_about_its_rows(
    big: tuple[merkle.Database, dict[int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, model = big
    folds = Folds(monkeypatch)
    for end in (TAIL + PENDING_TAIL, TAIL + 50_000, TAIL - 1):
        folds.reset()
        assert _keys(db.scan("t", to_pk=end, reverse=True, limit=10)) == _expect(
            model, to_pk=end, reverse=True, limit=10
        )
        # Before: every pending change from the table's start to `end`.
        assert 0 < folds.total <= 10_000, (end, folds.sizes)
    folds.reset()
    assert _keys(db.scan("t", limit=10)) == _expect(model, limit=10)
    assert _keys(db.scan("t", reverse=True, limit=10)) == _expect(model, reverse=True, limit=10)
    assert folds.total <= 20_000, folds.sizes


def test_keyset_pagination_through_the_pending_area_is_linear(
    big: tuple[merkle.Database, dict[int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, model = big
    folds = Folds(monkeypatch)
    got: list[int] = []
    last = TAIL
    for _ in range(20):
        page = _keys(db.scan("t", from_pk=last, limit=1000))
        got += page
        last = page[-1] + 1
    assert got == _expect(model, from_pk=TAIL, limit=20_000)
    # Before: each page folded the whole tail after it (about 20 x 100,000 entries).
    assert folds.total <= 100_000, folds.sizes


def test_offset_and_limit_within_key_bounds_fold_what_they_pass(
    big: tuple[merkle.Database, dict[int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, model = big
    folds = Folds(monkeypatch)
    options: dict[str, Any] = {"from_pk": TAIL, "offset": 5_000, "limit": 10}
    assert _keys(db.scan("t", **options)) == _expect(model, **options)
    assert folds.total <= 40_000, folds.sizes
    folds.reset()
    options = {"from_pk": 3, "to_pk": TAIL + 90_000, "offset": 7, "limit": 5, "reverse": True}
    assert _keys(db.scan("t", **options)) == _expect(model, **options)
    assert folds.total <= 20_000, folds.sizes


def test_an_unbounded_stream_folds_one_window_at_a_time(
    big: tuple[merkle.Database, dict[int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``to_batches`` without bounds held a fold of the whole pending area for the read;
    with windows of at most 4,096 keys of each batch part no fold holds a third of it."""
    db, model = big
    monkeypatch.setattr("merkle.tablets.windows._MOST", 4096)
    folds = Folds(monkeypatch)
    keys: list[int] = []
    for part in db.to_batches("t", fields=["v"]):
        keys += part.column(KEY).to_pylist()
    assert keys == sorted(model)
    pending = db.describe_table("t")["patch"]["count"]
    assert len(folds.sizes) > 3
    assert max(folds.sizes) <= pending // 3, folds.sizes


def test_a_whole_table_read_folds_the_pending_area_once_for_every_read(
    big: tuple[merkle.Database, dict[int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``to_arrow`` of the whole table folded the pending area a window at a time and
    kept no fold, so every repeated read folded it all again (25% more CPU for a 1M-row
    table with 230k pending rows). The result holds every row anyway: it folds the
    whole area once, cached on the table's version, as every read by rank does."""
    db, model = big
    monkeypatch.setattr("merkle.tablets.windows._MOST", 4096)
    folds = Folds(monkeypatch)
    for _ in range(3):
        table = db.to_arrow("t")
        assert table.column(KEY).to_pylist() == sorted(model)
        assert table.column("v").to_pylist() == [model[k]["v"] for k in sorted(model)]
    assert len(folds.sizes) == 1, folds.sizes
    folds.reset()
    lo, hi = TAIL + 10, TAIL + 20_000
    ranged = db.to_arrow("t", from_pk=lo, to_pk=hi)  # a key range folds only its changes
    assert ranged.column(KEY).to_pylist() == [k for k in sorted(model) if lo <= k <= hi]
    assert folds.total < db.describe_table("t")["patch"]["count"] // 2, folds.sizes


@pytest.fixture
def small() -> Iterator[tuple[merkle.Database, dict[int, dict[str, Any]]]]:
    """A table of small tablets with upserts, overwrites, deletes and patches pending in
    several batches, and its model."""
    conn = merkle.connect("memory://")
    db = (
        conn.create_db("d")
        .create_table("t", key=KEY, tablet_size_limit=64, patch_limit=10**9)
        .commit()
    )
    model: dict[int, dict[str, Any]] = {}
    first = [{KEY: k, "v": k} for k in range(0, 1200, 3)]
    db = db.write("t", first).commit().compact("t").commit()
    model.update({r[KEY]: dict(r) for r in first})
    rng = random.Random(7)
    for round_ in range(4):
        ups = [{KEY: k, "v": k * 10 + round_} for k in rng.sample(range(1300), 150)]
        db = db.write("t", ups).commit()  # whole records: a write replaces
        model.update({r[KEY]: dict(r) for r in ups})
        gone = rng.sample(sorted(model), 40)
        db = db.delete("t", gone).commit()
        for k in gone:
            del model[k]
        patched = {k: {"w": f"p{round_}-{k}"} for k in rng.sample(sorted(model), 40)}
        db = db.update("t", patched).commit()
        for k, change in patched.items():
            model[k]["w"] = change["w"]
    assert db.describe_table("t")["patch"]["count"] > 300
    yield db, model
    conn.close()


@pytest.mark.parametrize("budgets", [(1, 3), (2, 8), (1024, 1 << 16)])
def test_windowed_scans_answer_as_the_model(
    small: tuple[merkle.Database, dict[int, dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    budgets: tuple[int, int],
) -> None:
    """Key order, newest batch winning, deletes and patches applied, offsets counted
    across windows, whatever the windows' sizes."""
    db, model = small
    monkeypatch.setattr("merkle.tablets.windows._FIRST", budgets[0])
    monkeypatch.setattr("merkle.tablets.windows._MOST", budgets[1])
    rng = random.Random(budgets[1])
    bounds = [None, -5, 0, 1, 299, 300, 301, 700, 1199, 1299, 1400]
    for _ in range(150):
        options: dict[str, Any] = {
            "from_pk": rng.choice(bounds),
            "to_pk": rng.choice(bounds),
            "offset": rng.choice([None, 0, 1, 5, 37, 200]),
            "limit": rng.choice([None, 0, 1, 3, 10, 64, 500]),
            "reverse": rng.choice([False, True]),
            "fields": rng.choice([None, ["v"], ["w"]]),
        }
        assert list(db.scan("t", **options)) == model_scan(model, KEY, **options), options
    assert db.to_arrow("t").to_pylist() == [
        {KEY: r[KEY], "v": r["v"], "w": r.get("w")} for r in model_scan(model, KEY)
    ]
    streamed = pa.Table.from_batches(list(db.to_batches("t", from_pk=100, to_pk=900)))
    assert streamed.column(KEY).to_pylist() == _expect(model, from_pk=100, to_pk=900)


# -- merkle diff ------------------------------------------------------------------------


ROWS = 20_000


@pytest.fixture
def diffed(tmp_path: Path) -> str:
    """A file lake whose database ``d`` rewrote all ROWS records of ``t`` in version 3."""
    uri = (tmp_path / "lake").as_uri()
    with merkle.connect(uri) as conn:
        db = conn.create_db("d").create_table("t", key=KEY, tablet_size_limit=1000).commit()
        keys = np.arange(ROWS, dtype=np.int64)
        for tag in ("a", "b"):
            values = pa.array([f"{tag}{i}" for i in range(ROWS)])
            db = db.write("t", pa.table({KEY: keys, "v": values})).commit()
        assert db.version == 3
    return uri


class Recorder(io.StringIO):
    """stdout for the command: logs each write of a record line among the reads."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def write(self, text: str) -> int:
        if '"change"' in text or ",update," in text:
            self.log.append("write")
        return super().write(text)


def _diff(uri: str, fmt: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    """``merkle diff d 2 3 -f fmt``'s output, and the order of its reads and writes."""
    log: list[str] = []
    real = db_diff.change_records

    def reading(*args: Any) -> list[dict[str, Any]]:
        log.append("read")
        return real(*args)

    out = Recorder(log)
    monkeypatch.setattr(db_diff, "change_records", reading)
    monkeypatch.setattr(output, "_stdout", lambda: out)
    result = CliRunner().invoke(
        cli,
        ["--lake", uri, "diff", "d", "2", "3", "--format", fmt],
        env={"MERKLE_LAKE": None, "MERKLE_AUTHOR": None},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return out.getvalue(), log


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_diff_prints_records_as_it_reads_them(
    diffed: str, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, log = _diff(diffed, fmt, monkeypatch)
    reads = [i for i, event in enumerate(log) if event == "read"]
    assert len(reads) > 2
    # Before: every change set was read (TableDiff.records(), a list) before a line.
    assert log.index("write") < reads[-1], log[:20]
    # The bytes are those of the rows listed first and printed (as before).
    with merkle.connect(diffed) as conn:
        changes = conn.open_db("d").diff(2)
        rows = [{"table": "t", **rec} for rec in changes["t"].records()]
    expected = io.StringIO()
    output.emit_rows(rows, fmt, columns=["table", "key", "change", "old", "new"], file=expected)
    assert text == expected.getvalue()
    if fmt == "jsonl":
        first = json.loads(text.splitlines()[0])
        assert first == {"table": "t", "key": 0, "change": "update"} | {
            "old": {KEY: 0, "v": "a0"},
            "new": {KEY: 0, "v": "b0"},
        }


def test_diff_jsonl_memory_does_not_grow_with_the_diff(
    diffed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 changed records held as dicts take well over 10 MB of Python objects;
    a stream holds one change set's."""
    monkeypatch.setattr(output, "_stdout", lambda: _Sink())
    _Sink.lines = 0
    tracemalloc.start()
    try:
        result = CliRunner().invoke(
            cli,
            ["--lake", diffed, "diff", "d", "2", "3", "--format", "jsonl"],
            env={"MERKLE_LAKE": None, "MERKLE_AUTHOR": None},
            catch_exceptions=False,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    assert _Sink.lines == ROWS
    assert peak < 8 << 20, peak


class _Sink(io.StringIO):
    """stdout that keeps nothing, counting lines."""

    lines = 0

    def write(self, text: str) -> int:
        _Sink.lines += text.count("\n")
        return len(text)
