"""Random histories for the model tests of diff, merge and sync.

A history is a list of steps applied to a database and, in parallel, to a
plain Python model (table -> key -> record). Steps write, delete, compact
(flush pending batches into tablets), create and drop tables, and commit.
Tables are made tiny (tablets of a few records, branching 3, small patch
limits) so a few dozen records already build multi-level trees with
pending batches on top.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

import merkle

Model = dict[str, dict[int, dict[str, Any]]]

TABLES = ("a", "b", "c")
KEYS = st.integers(min_value=0, max_value=150)
VALUES = st.one_of(
    st.integers(min_value=-5, max_value=5),
    st.text(alphabet="xyz", max_size=3),
    st.none(),
    st.lists(st.integers(min_value=0, max_value=3), max_size=2),
)


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, Any]]:
    size = draw(st.sampled_from([3, 3, 40]))
    keys = draw(st.lists(KEYS, min_size=1, max_size=size, unique=True))
    out = []
    for k in keys:
        rec: dict[str, Any] = {"k": k}
        for name in ("v", "w"):
            value = draw(VALUES)
            if value is not None:
                rec[name] = value
        out.append(rec)
    return out


STEP = st.one_of(
    st.tuples(st.just("write"), st.just("a"), records()),
    st.tuples(st.just("write"), st.sampled_from(TABLES), records()),
    st.tuples(st.just("write"), st.just("a"), records()),
    st.tuples(st.just("delete"), st.sampled_from(TABLES), st.lists(KEYS, max_size=20)),
    st.tuples(st.just("compact"), st.sampled_from(TABLES), st.none()),
    st.tuples(st.just("create"), st.sampled_from(TABLES), st.none()),
    st.tuples(st.just("drop"), st.sampled_from(TABLES), st.none()),
    st.tuples(st.just("commit"), st.none(), st.none()),
)
HISTORY = st.lists(STEP, max_size=16)


def create_table(db: merkle.Database, name: str) -> merkle.Database:
    return db.create_table(
        name,
        key="k",
        tablet_size_limit=4,
        branching_factor=3,
        patch_limit=6,
        patch_share=30,
        schema_free=True,  # the record model: a field's values are of any kind
    )


_GENERATIONS = iter(range(1, 1 << 62))


def apply(
    db: merkle.Database, model: Model, steps: list[Any], gens: dict[str, int] | None = None
) -> merkle.Database:
    """Apply ``steps`` to ``db`` and ``model`` alike; commit at the end.

    ``gens`` (table -> a number made when the table was created) tells a
    table dropped and created again from the one before.
    """
    gens = {} if gens is None else gens
    for kind, table, arg in steps:
        if kind == "commit":
            db = db.commit()
            continue
        exists = table in model
        if kind == "create":
            if not exists:
                db = create_table(db, table)
                model[table] = {}
                gens[table] = next(_GENERATIONS)
        elif kind == "drop":
            if exists:
                db = db.drop_table(table)
                del model[table]
                gens.pop(table, None)
        elif not exists:
            continue
        elif kind == "write":
            db = db.write(table, arg)
            model[table].update({r["k"]: dict(r) for r in arg})
        elif kind == "delete":
            db = db.delete(table, arg)
            for k in arg:
                model[table].pop(k, None)
        elif kind == "compact":
            db = db.compact(table)
    return db.commit()


def copy_model(model: Model) -> Model:
    return {t: {k: dict(r) for k, r in rows.items()} for t, rows in model.items()}


def state(db: merkle.Database) -> Model:
    """What ``db`` holds, read back through scans."""
    return {t: {r["k"]: r for r in db.scan(t)} for t in db.list_tables()}


def expected_diff(old: Model, new: Model, table: str) -> list[dict[str, Any]]:
    """The records ``diff`` must report for ``table`` (key order)."""
    a, b = old.get(table, {}), new.get(table, {})
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in b:
            out.append({"key": k, "change": "delete", "old": a[k], "new": None})
        elif k not in a:
            out.append({"key": k, "change": "insert", "old": None, "new": b[k]})
        elif a[k] != b[k]:
            out.append({"key": k, "change": "update", "old": a[k], "new": b[k]})
    return out
