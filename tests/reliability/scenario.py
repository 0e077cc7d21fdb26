"""A small life of a lake (commits, a clone, reads, gc, verify), and what must hold after it.

:func:`run_scenario` drives one connection through the steps below on a
given store, in one thread, carrying on past failed steps (a step whose
input a failed step should have made is skipped). It records every commit
that returned (acknowledged) with the rows that version must hold, and every
exception, split into ``merkle.errors`` ones and others.

:func:`check_lake` opens the lake afresh (a new connection on an unwrapped
store) and returns the problems: an acknowledged version that cannot be read
or reads other rows, a version in a journal that reaches a missing or corrupt
block, a journal that cannot be read. The single-fault sweep runs the
scenario once per (call position, fault kind) and expects no problems and
no foreign exceptions.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import merkle
from merkle.db.connection import Connection
from merkle.errors import MerkleError, StorageError
from merkle.gc import journal_names
from merkle.refs import WriterSession
from merkle.storage import ObjectStore

__all__ = ["Outcome", "check_lake", "run_scenario"]

Rows = dict[str, list[dict[str, Any]]]  # table -> records in key order


@dataclass
class Outcome:
    """What a run of the scenario did."""

    acknowledged: dict[tuple[str, int], Rows] = field(default_factory=dict)
    errors: list[tuple[str, MerkleError]] = field(default_factory=list)
    foreign: list[tuple[str, str]] = field(default_factory=list)  # (step, traceback)
    skipped: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    #: Steps that failed with ``StorageError(definite=True)``: "nothing happened".
    refused: list[str] = field(default_factory=list)


def _rows(start: int, stop: int, tag: str) -> list[dict[str, Any]]:
    return [{"id": i, "v": f"{tag}-{i}", "n": i * 7} for i in range(start, stop)]


def _apply(
    model: dict[int, dict[str, Any]], write: list[dict[str, Any]], delete: list[int]
) -> Rows:
    for record in write:
        model[record["id"]] = dict(record)
    for key in delete:
        model.pop(key, None)
    return {"t": [model[k] for k in sorted(model)]}


def read_rows(db: merkle.Database) -> Rows:
    """Every table of ``db`` by full scans."""
    return {name: list(db.scan(name)) for name in db.list_tables()}


#: Small tablets and batches, so a few dozen rows make several blocks of each kind.
_LIMITS: dict[str, Any] = {"tablet_size_limit": 6, "branching_factor": 3, "patch_limit": 4}


#: GC keeps this many versions of each database: versions 0 and 1 of "shop" go, and the
#: revert (version 3) re-uses version 1's blocks, which must stay.
KEEP_VERSIONS = 2


def run_scenario(store: ObjectStore, *, gc_grace: timedelta = timedelta(0)) -> Outcome:
    """Run the scenario on ``store`` (see the module doc); never raises."""
    out = Outcome()
    state: dict[str, Any] = {}
    shop: dict[int, dict[str, Any]] = {}

    def step(name: str, needs: tuple[str, ...], body: Callable[[], None]) -> None:
        if any(need not in state for need in needs):
            out.skipped.append(name)
            return
        try:
            body()
        except MerkleError as exc:
            out.errors.append((name, exc))
            if isinstance(exc, StorageError) and exc.definite:
                out.refused.append(name)
        except Exception:
            out.foreign.append((name, traceback.format_exc()))
        else:
            out.completed.append(name)

    def ack(db: merkle.Database, rows: Rows) -> None:
        out.acknowledged[(db.name, db.version)] = rows

    def connect() -> None:
        conn = Connection(store, workers=1)
        # The idle writer lease is released by the collection (release_idle, on this
        # thread), never by the idle timer of the lease thread: on a loaded machine the
        # timer fired first, the sequence of store calls changed, and a fault planned
        # from the clean run's sequence missed its call. For the same reason the lease
        # lives for the whole run: with the default TTL (15 s) a commit more than 2.5 s
        # after the lease was taken (the TTL's half and the skew margin) may find it
        # due and take a new one before the lease thread renews it, one put_if_absent
        # more (seen on S3 under load: "fault applied at put_if_absent call 11 did not
        # fire").
        conn._writer = WriterSession(conn.leases, idle=3600.0, ttl=3600.0)
        state["conn"] = conn

    def create() -> None:
        db = state["conn"].create_db("shop", metadata={"owner": "ops"})
        ack(db, {})
        state["v0"] = db

    def load() -> None:
        db = state["v0"].create_table("t", key="id", **_LIMITS)
        rows = _rows(0, 24, "a")
        db = db.write("t", rows).commit(message="load")
        ack(db, _apply(shop, rows, []))
        state["v1"] = db

    def change() -> None:
        rows = _rows(18, 30, "b")
        db = state["v1"].write("t", rows).delete("t", [0, 1, 2, 5]).commit(message="change")
        ack(db, _apply(shop, rows, [0, 1, 2, 5]))
        state["v2"] = db
        state["shop_rows"] = {"t": [shop[k] for k in sorted(shop)]}

    def clone() -> None:
        db = state["conn"].create_db("copy", root=state["v2"])
        ack(db, state["shop_rows"])
        state["copy"] = db

    def change_clone() -> None:
        model = {r["id"]: r for r in state["shop_rows"]["t"]}
        rows = _rows(40, 46, "c")
        db = state["copy"].write("t", rows).delete("t", [20]).commit(message="clone change")
        ack(db, _apply(model, rows, [20]))

    def revert() -> None:
        # Re-commit version 1's rows on top of version 2: a commit that re-uses blocks.
        v2 = state["conn"].open_db("shop")
        old = read_rows(state["conn"].open_db("shop", version=1))
        db = v2.drop_table("t").create_table("t", key="id", **_LIMITS).write("t", old["t"])
        db = db.commit(message="revert")
        ack(db, old)

    def read_old() -> None:
        conn = state["conn"]
        with conn.open_db("shop", version=1, lease=True) as db:
            read_rows(db)
            db.get_records("t", [3, 4, 99])
        conn.history("shop")
        conn.list_dbs()

    def collect() -> None:
        merkle.gc(state["conn"], keep_versions=KEEP_VERSIONS, grace=gc_grace, writer_wait=0.0)

    def verify() -> None:
        merkle.verify(state["conn"])

    def read_heads() -> None:
        conn = state["conn"]
        for name in conn.list_dbs():
            read_rows(conn.open_db(name))

    step("connect", (), connect)
    step("create", ("conn",), create)
    step("load", ("v0",), load)
    step("change", ("v1",), change)
    step("clone", ("v2",), clone)
    step("change clone", ("copy",), change_clone)
    step("revert", ("v2",), revert)
    step("read old", ("v1",), read_old)
    step("gc", ("conn",), collect)
    step("verify", ("conn",), verify)
    step("read heads", ("conn",), read_heads)
    if "conn" in state:
        state["conn"].close()
    return out


#: The commit steps: the database each commits to, and its message.
COMMITS = {
    "load": ("shop", "load"),
    "change": ("shop", "change"),
    "change clone": ("copy", "clone change"),
    "revert": ("shop", "revert"),
}


def check_lake(store: ObjectStore, outcome: Outcome) -> list[str]:
    """Problems a fresh connection finds (see the module doc); empty when all holds."""
    problems: list[str] = []
    with Connection(store, workers=1, create=False) as conn:
        for name in outcome.refused:  # "surely did not happen" must be true
            if name in COMMITS:
                db, message = COMMITS[name]
                landed = [e.version for e in _history(conn, db) if e.message == message]
            elif name in ("create", "clone"):
                landed = [e.version for e in _history(conn, "shop" if name == "create" else "copy")]
            else:
                continue
            if landed:
                problems.append(
                    f"step {name!r} failed with a definite StorageError (nothing happened), "
                    f"but its version {landed[0]} is in the journal"
                )
        for (name, version), rows in sorted(outcome.acknowledged.items()):
            head = conn.refs.head(name)
            if head is not None and version <= head.version - KEEP_VERSIONS:
                continue  # retention may have removed it (if the gc step got that far)
            try:
                found = read_rows(conn.open_db(name, version=version))
            except Exception as exc:
                problems.append(
                    f"acknowledged {name!r} version {version} cannot be read: "
                    f"{type(exc).__name__}: {exc}"
                )
                continue
            if found != rows:
                problems.append(f"acknowledged {name!r} version {version} reads other rows")
        try:
            names = journal_names(conn)
            for name in names:
                conn.refs.history(name)
            report = merkle.verify(conn)
        except Exception as exc:
            problems.append(f"the journals cannot be checked: {type(exc).__name__}: {exc}")
        else:
            problems.extend(
                f"{where} reaches a missing block {cid}" for cid, where in report.missing
            )
            problems.extend(
                f"{where} reaches a corrupt block {cid}" for cid, where in report.corrupt
            )
    return problems


def _history(conn: Connection, db: str) -> list[Any]:
    """The journal entries of ``db`` (none if it has no journal)."""
    try:
        return conn.refs.history(db)
    except MerkleError:
        return []
