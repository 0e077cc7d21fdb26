"""Timestamp keys read the same on every path that shows them as ``scan`` does.

A naive ``timestamp`` key field (records of naive datetimes, or an Arrow naive
key column of any unit) reads back naive from ``scan``; a zoned one as the
instant in UTC. ``list_tablets`` bounds, ``TableDiff.records`` and the records a
merge resolver receives must hold the keys ``scan`` gives (type, value and
``tzinfo``); ``TableDiff.to_arrow`` and a merge conflict table must give the key
column the key field's type (naive or zoned, its unit), as ``to_arrow`` does.
They gave the codec's UTC-aware keys and ``timestamp[us, tz=UTC]`` before.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import MergeConflictError

_TIMES = [dt.datetime(2020, 1, 1, 12) + dt.timedelta(hours=7 * i) for i in range(12)]
_V = list(range(len(_TIMES)))


def _arrow(kind: pa.DataType, composite: bool = False) -> pa.Table:
    columns: dict[str, Any] = {"g": pa.array([i % 2 for i in _V])} if composite else {}
    return pa.table({**columns, "t": pa.array(_TIMES, kind), "v": _V})


def _records(composite: bool = False) -> list[dict[str, Any]]:
    return [{**({"g": i % 2} if composite else {}), "t": t, "v": i} for i, t in enumerate(_TIMES)]


_PARIS = pa.timestamp("us", tz="Europe/Paris")
#: (key, key_codec, rows): every kind of timestamp key field whose keys the codec
#: stores as UTC microseconds but whose field is naive, of another unit or zone.
KINDS = {
    "records": ("t", None, _records()),
    "reversed": ("t", "reverse(timestamp)", _records()),
    "composite": (["g", "t"], None, _records(composite=True)),
    "arrow-s": ("t", None, _arrow(pa.timestamp("s"))),
    "arrow-us": ("t", None, _arrow(pa.timestamp("us"))),
    "arrow-ns": ("t", None, _arrow(pa.timestamp("ns"))),
    "arrow-reversed-ns": ("t", "reverse(timestamp)", _arrow(pa.timestamp("ns"))),
    "arrow-composite-ms": (["g", "t"], None, _arrow(pa.timestamp("ms"), composite=True)),
    "paris": ("t", None, _arrow(_PARIS)),
    "paris-composite-ns": (["g", "t"], None, _arrow(pa.timestamp("ns", "Europe/Paris"), True)),
}
#: The naive ones: as records, a zoned key field's keys were already the UTC instants
#: ``scan`` gives (its Arrow outputs were not of the field's zone and unit).
NAIVE = [kind for kind in KINDS if not kind.startswith("paris")]


def _same(got: Any, want: Any) -> bool:
    """Equal with the same type, and for datetimes the same ``tzinfo`` (naive or UTC)."""
    if isinstance(want, tuple):
        return (
            isinstance(got, tuple)
            and len(got) == len(want)
            and all(_same(a, b) for a, b in zip(got, want, strict=True))
        )
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(_same(got[k], want[k]) for k in want)
        )
    return (
        type(got) is type(want)
        and got == want
        and getattr(got, "tzinfo", None) == getattr(want, "tzinfo", None)
    )


def _key_of(key: Any, record: dict[str, Any]) -> Any:
    return tuple(record[name] for name in key) if isinstance(key, list) else record[key]


def _table(conn: merkle.Connection, kind: str, **limits: Any) -> merkle.Database:
    key, codec, rows = KINDS[kind]
    db = conn.create_db("main").create_table("t", key=key, key_codec=codec, **limits)
    return db.write("t", rows).commit()


def _arrow_keys(db: merkle.Database, key: Any) -> pa.Array:
    """The key column as ``to_arrow`` gives it (a composite key as a struct of its fields)."""
    table = db.to_arrow("t")
    if isinstance(key, str):
        return table.column(key).combine_chunks()
    parts = [table.column(name).combine_chunks() for name in key]
    return pa.StructArray.from_arrays(parts, names=list(key))


@pytest.mark.parametrize("kind", NAIVE)
def test_tablet_bounds_are_keys_as_scan_gives_them(kind: str) -> None:
    key = KINDS[kind][0]
    with merkle.connect("memory://") as conn:
        db = _table(conn, kind, tablet_size_limit=3, patch_limit=1)
        keys = [_key_of(key, r) for r in db.scan("t")]
        tablets = db.list_tablets("t")
        assert len(tablets) > 1
        assert sum(t["count"] for t in tablets) == len(keys)
        first = 0
        for tablet in tablets:
            last = first + tablet["count"] - 1
            assert _same(tablet["start"], keys[first]), (tablet["start"], keys[first])
            assert _same(tablet["end"], keys[last]), (tablet["end"], keys[last])
            first = last + 1


@pytest.mark.parametrize("kind", list(KINDS))
def test_diff_keys_are_as_scan_and_to_arrow_give_them(kind: str) -> None:
    key = KINDS[kind][0]
    with merkle.connect("memory://") as conn:
        old = _table(conn, kind)
        scanned = list(old.scan("t"))
        new = old.upsert("t", [{**r, "v": r["v"] + 100} for r in scanned]).commit()
        changes = new.diff(old, table="t")["t"]
        records = changes.records()
        after = list(new.scan("t"))
        assert [c["change"] for c in records] == ["update"] * len(after)
        for change, rec in zip(records, after, strict=True):
            assert _same(change["key"], _key_of(key, rec))
            assert _same(change["new"], rec)
        arrow = changes.to_arrow().column("key").combine_chunks()
        want = _arrow_keys(new, key)
        assert arrow.type == want.type
        assert arrow.equals(want)


def _branches(
    conn: merkle.Connection, main: merkle.Database
) -> tuple[merkle.Database, merkle.Database]:
    """``main`` and ``dev`` after each updated every row its own way (all conflicts)."""
    scanned = list(main.scan("t"))
    dev = conn.create_db("dev", root=main)
    dev = dev.upsert("t", [{**r, "v": r["v"] + 100} for r in scanned]).commit()
    main = main.upsert("t", [{**r, "v": r["v"] + 200} for r in scanned]).commit()
    return main, dev


@pytest.mark.parametrize("kind", NAIVE)
def test_a_resolver_gets_the_keys_and_records_scan_gives(kind: str) -> None:
    key = KINDS[kind][0]
    with merkle.connect("memory://") as conn:
        base = _table(conn, kind)
        main, dev = _branches(conn, base)
        seen: list[dict[str, Any]] = []

        def resolve(conflict: dict[str, Any]) -> dict[str, Any]:
            seen.append(conflict)
            return conflict["theirs"]  # type: ignore[no-any-return]

        merged = conn.merge("dev", "main", resolve=resolve)
        sides = {"base": base, "ours": main, "theirs": dev}
        scans = {side: list(db.scan("t")) for side, db in sides.items()}
        assert len(seen) == len(scans["base"])
        for i, conflict in enumerate(seen):
            assert _same(conflict["key"], _key_of(key, scans["base"][i]))
            for side in sides:
                assert _same(conflict[side], scans[side][i]), (side, conflict[side])
        assert list(merged.scan("t")) == scans["theirs"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_conflict_table_keys_are_as_to_arrow_gives_them(kind: str) -> None:
    key = KINDS[kind][0]
    with merkle.connect("memory://") as conn:
        main, _ = _branches(conn, _table(conn, kind))
        with pytest.raises(MergeConflictError) as caught:
            conn.merge("dev", "main")
        keys = caught.value.conflicts["t"].column("key").combine_chunks()  # type: ignore[attr-defined]
        want = _arrow_keys(main, key)
        assert keys.type == want.type
        assert keys.equals(want)


@pytest.mark.parametrize(
    "kind",
    [pa.timestamp("us", tz="Europe/Paris"), pa.timestamp("ns", tz="America/New_York")],
    ids=["paris-us", "new-york-ns"],
)
def test_a_resolver_gets_a_zoned_field_in_its_zone_as_scan_does(kind: pa.DataType) -> None:
    rows = pa.table({"k": [1, 2], "at": pa.array(_TIMES[:2], kind), "v": [0, 1]})
    with merkle.connect("memory://") as conn:
        main = conn.create_db("main").create_table("t", key="k").write("t", rows).commit()
        dev = conn.create_db("dev", root=main).update("t", {1: {"v": 10}}).commit()
        main = main.update("t", {1: {"v": 20}}).commit()
        seen: list[dict[str, Any]] = []
        conn.merge("dev", "main", resolve=lambda c: seen.append(c) or c["ours"])
        assert [c["key"] for c in seen] == [1]
        assert _same(seen[0]["ours"], next(iter(main.scan("t"))))
        assert _same(seen[0]["theirs"], next(iter(dev.scan("t"))))
