"""A rebasing commit's replay, and commits of one value, are right where a probe found them wrong.

The probe found:

- an ``upsert`` or ``delete_where`` that changed nothing on the transaction's base
  was not recorded, so a replay on a concurrent head never ran it (a lost write);
- one value committed from several threads at once made several versions;
- a value derived from a committed one replayed the committed operations again;
- ``update`` / ``upsert`` kept the caller's dicts and lists, so mutating them after
  the call changed what a replay committed;
- a commit whose base version garbage collection removed raised MissingBlockError
  (from the "changes nothing?" check) instead of replaying;
- replayed user functions failed with a bare KeyError, a ``delete_where`` error showed
  an internal column, and a key-type conflict advised making the key schema-free;
- a stale write conflicted over an all-null column of a field dropped and added again
  with another type;
- ``to_pandas(limit=...)`` raised a TypeError naming ``to_arrow``, and ``read_tablet``
  ignored an unknown field.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import Lake, make_lake

import merkle
from merkle.errors import ConflictError, UsageError


@pytest.fixture(params=["memory", "file"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    """A fresh memory lake and a fresh file lake (the replay logic is the same on S3)."""
    return make_lake(request.param, tmp_path, request)


def _rows(db: merkle.Database, table: str = "t") -> dict[Any, dict[str, Any]]:
    return {r["k"]: r for r in db.scan(table)}


def _setup(conn: merkle.Connection, **meta: Any) -> merkle.Database:
    db = conn.create_db("d", metadata=meta or None).create_table("t", key="k")
    return db.write("t", [{"k": i, "v": i} for i in range(5)]).commit()


# -- 1. operations that change nothing on the base are still replayed ---------------------


def test_an_upsert_skipping_a_missing_key_updates_it_once_a_concurrent_commit_inserted_it(
    conn: merkle.Connection,
) -> None:
    _setup(conn)
    a = conn.open_db("d").upsert("t", [{"k": 10, "v": 100}], when_not_matched="skip")
    a = a.write("t", [{"k": 1, "v": -1}])
    conn.open_db("d").write("t", [{"k": 10, "v": 0}]).commit()
    a.commit()
    rows = _rows(conn.open_db("d"))
    assert rows[10] == {"k": 10, "v": 100}  # as if run after the other commit
    assert rows[1] == {"k": 1, "v": -1}


def test_a_delete_where_matching_nothing_deletes_what_a_concurrent_commit_inserted(
    conn: merkle.Connection,
) -> None:
    _setup(conn)
    a = conn.open_db("d").delete_where("t", pc.field("v") == 777)
    a = a.delete_where("t", lambda r: r["v"] == 778)
    conn.open_db("d").write("t", [{"k": 20, "v": 777}, {"k": 21, "v": 778}]).commit()
    a.commit()
    rows = _rows(conn.open_db("d"))
    assert 20 not in rows
    assert 21 not in rows
    assert len(rows) == 5


def test_a_condition_false_on_the_base_is_tested_again_on_the_new_head(
    conn: merkle.Connection,
) -> None:
    _setup(conn)
    a = conn.open_db("d").upsert(
        "t", [{"k": 3, "v": 50}], condition=lambda old, new: old["v"] >= 100
    )
    conn.open_db("d").write("t", [{"k": 3, "v": 200}]).commit()
    a.commit()
    assert _rows(conn.open_db("d"))[3] == {"k": 3, "v": 50}


def test_an_upsert_skipping_a_matched_key_inserts_it_once_a_concurrent_commit_deleted_it(
    conn: merkle.Connection,
) -> None:
    _setup(conn)
    a = conn.open_db("d").upsert("t", [{"k": 0, "v": 999}], when_matched="skip")
    conn.open_db("d").delete("t", [0]).commit()
    a.commit()
    assert _rows(conn.open_db("d"))[0] == {"k": 0, "v": 999}


def test_an_update_of_a_table_never_written_updates_what_a_concurrent_first_write_made(
    conn: merkle.Connection,
) -> None:
    conn.create_db("d").create_table("t", key="k").commit()
    a = conn.open_db("d").update("t", {1: {"v": 10}})
    conn.open_db("d").write("t", [{"k": 1, "v": 1}, {"k": 2, "v": 2}]).commit()
    a.commit()
    assert _rows(conn.open_db("d")) == {1: {"k": 1, "v": 10}, 2: {"k": 2, "v": 2}}


def test_a_transaction_of_only_no_op_operations(conn: merkle.Connection) -> None:
    """Unmoved head: committed as unchanged (no version). Moved head: replayed and committed."""
    base = _setup(conn)
    noop = conn.open_db("d").upsert("t", [{"k": 10, "v": 1}], when_not_matched="skip")
    assert noop.dirty
    assert noop.commit().version == base.version
    assert next(e.version for e in conn.history("d")) == base.version

    a = conn.open_db("d").delete_where("t", pc.field("v") == 777)
    conn.open_db("d").write("t", [{"k": 20, "v": 777}]).commit()
    done = a.commit()
    assert done.version == base.version + 2
    assert 20 not in _rows(conn.open_db("d"))


# -- 2. one value committed from several threads makes one version -------------------------


class _Arrivals:
    """Which threads reached a commit's critical section (the per-value commit lock, for
    which this is a stand-in noting who asks for it, or ``land_commit``) or were done.
    The first thread to land waits until every thread arrived, so the race is certain."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.seen: set[int] = set()
        self.changed = threading.Condition()
        self.lock = threading.Lock()
        self.first_landing = True

    def arrive(self) -> None:
        with self.changed:
            self.seen.add(threading.get_ident())
            self.changed.notify_all()

    def __enter__(self) -> None:  # the commit lock of the value
        self.arrive()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def landing(self) -> None:
        self.arrive()
        with self.changed:
            first, self.first_landing = self.first_landing, False
            if first:
                self.changed.wait_for(lambda: len(self.seen) == self.threads)


def test_one_value_committed_from_several_threads_at_once_makes_one_version(
    conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    from merkle.db import landing

    conn.create_db("d", metadata={"n": 0}).create_table("t", key="k").commit()
    db = (
        conn.open_db("d")
        .alter_db_meta(lambda m: {**m, "n": m["n"] + 1})
        .write("t", [{"k": i, "v": i} for i in range(200)])
    )
    threads = 4
    arrivals = _Arrivals(threads)
    db._commit_lock = arrivals  # type: ignore[assignment]
    land_commit = landing.land_commit

    def landed(*args: Any, **kwargs: Any) -> Any:
        arrivals.landing()
        return land_commit(*args, **kwargs)

    monkeypatch.setattr(landing, "land_commit", landed)
    barrier = threading.Barrier(threads)
    versions: list[int] = []
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            barrier.wait()
            versions.append(db.commit().version)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            arrivals.arrive()  # a commit that returned without landing arrived too

    workers = [threading.Thread(target=commit) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    assert versions == [2] * threads
    assert conn.open_db("d").metadata == {"n": 1}
    assert [e.version for e in conn.history("d")] == [2, 1, 0]


# -- 3. a value derived from a committed value continues from it ---------------------------


def test_a_value_derived_from_a_committed_value_does_not_replay_its_operations(
    conn: merkle.Connection,
) -> None:
    conn.create_db("d", metadata={"n": 0}).create_table("t", key="k").commit()
    db = conn.open_db("d").alter_db_meta(lambda m: {**m, "n": m["n"] + 1})
    db.commit()  # the slip: the committed value is not kept
    derived = db.write("t", [{"k": 1, "v": 1}])
    committed = derived.commit()
    assert committed.version == 3
    assert conn.open_db("d").metadata == {"n": 1}
    assert _rows(conn.open_db("d")) == {1: {"k": 1, "v": 1}}
    # The old value still reads as it was (values are immutable).
    assert db.version == 1
    assert db.metadata == {"n": 1}
    assert not _rows(db)


def test_a_write_after_a_committed_alter_schema_commits(conn: merkle.Connection) -> None:
    conn.create_db("d").create_table("t", key="k").commit()
    db = conn.open_db("d").alter_schema("t", add={"z": pa.int64()})
    db.commit()
    done = db.write("t", [{"k": 2, "v": 2}]).commit()
    assert done.version == 3
    assert _rows(conn.open_db("d")) == {2: {"k": 2, "v": 2}}


def test_a_value_derived_from_a_committed_one_sees_what_its_commit_replayed_onto(
    conn: merkle.Connection,
) -> None:
    _setup(conn)
    db = conn.open_db("d").write("t", [{"k": 1, "v": 10}])
    conn.open_db("d").write("t", [{"k": 7, "v": 7}]).commit()
    db.commit()  # replayed on the other commit
    derived = db.write("t", [{"k": 8, "v": 8}])
    assert {1, 7, 8} <= set(_rows(derived))
    assert 7 not in _rows(db)  # the old value is unchanged
    derived.commit()
    rows = _rows(conn.open_db("d"))
    assert rows[1] == {"k": 1, "v": 10}
    assert 7 in rows
    assert 8 in rows


# -- 4. the caller's input is copied when the operation is made ----------------------------


def test_mutating_the_input_after_update_and_upsert_does_not_change_the_replay(
    conn: merkle.Connection,
) -> None:
    _setup(conn)
    a = conn.open_db("d")
    fields: dict[str, Any] = {"v": 10, "tags": ["a"]}
    a = a.update("t", {1: fields})
    fields["v"] = 20  # the dict reused for the next key
    fields["tags"].append("b")
    a = a.update("t", {2: fields})
    rows = [{"k": 5, "v": 5, "l": [1]}]
    a = a.upsert("t", rows)
    rows[0]["v"] = 6
    rows[0]["l"].append(2)  # type: ignore[attr-defined]
    rows.append({"k": 6, "v": 6, "l": [6]})
    before = _rows(a)
    conn.open_db("d").write("t", [{"k": 9, "v": 9}]).commit()
    a.commit()
    after = _rows(conn.open_db("d"))
    assert after[1] == before[1] == {"k": 1, "v": 10, "tags": ["a"]}
    assert after[2] == before[2] == {"k": 2, "v": 20, "tags": ["a", "b"]}
    assert after[5] == before[5] == {"k": 5, "v": 5, "l": [1]}
    assert 6 not in after


# -- 5. garbage collection removed the transaction's base -----------------------------------


def test_a_commit_whose_base_was_collected_replays(tmp_path: Path) -> None:
    uri = (tmp_path / "lake").as_uri()
    conn = merkle.connect(uri, cache_bytes=1000)  # nothing of the base stays cached
    other = merkle.connect(uri)
    try:
        conn.create_db("d").create_table("t", key="k", tablet_size_limit=50).write(
            "t", [{"k": i, "v": i} for i in range(500)]
        ).commit()
        a = conn.open_db("d").write("t", [{"k": 1, "v": 12345}])  # no reader lease
        for i in range(3):
            other.open_db("d").write(
                "t", [{"k": j, "v": -i} for j in range(500)]
            ).compact().commit()
        merkle.gc(other, keep_versions=1, grace="0s")  # trims and sweeps a's base
        done = a.commit()
        assert done.version == 5
        assert conn.open_db("d").get_records("t", [1, 2]) == {
            1: {"k": 1, "v": 12345},
            2: {"k": 2, "v": -2},
        }
    finally:
        conn.close()
        other.close()


# -- 6. read-modify-write: replay does not re-check reads (documented) ----------------------


def test_read_modify_write_with_rebase_false_and_a_retry_loop(conn: merkle.Connection) -> None:
    """The pattern doc/api.md "Commit and conflicts" shows: a stale read is refused."""
    _setup(conn)
    stale = conn.open_db("d")
    conn.open_db("d").update("t", {1: {"v": 100}}).commit()  # a concurrent increment
    v = stale.get_records("t", [1])[1]["v"]
    with pytest.raises(ConflictError, match="rebase=False"):
        stale.update("t", {1: {"v": v + 1}}).commit(rebase=False)
    while True:
        db = conn.open_db("d")
        v = db.get_records("t", [1])[1]["v"]
        try:
            db.update("t", {1: {"v": v + 1}}).commit(rebase=False)
            break
        except ConflictError:
            continue
    assert _rows(conn.open_db("d"))[1]["v"] == 101


# -- 7. a replayed operation that fails says so --------------------------------------------


def test_a_replayed_delete_where_function_that_fails_is_a_conflict_naming_the_replay(
    conn: merkle.Connection,
) -> None:
    conn.create_db("d").create_table("t", key="k").write(
        "t", [{"k": i, "a": i} for i in range(3)]
    ).commit()
    a = conn.open_db("d").delete_where("t", lambda r: r["a"] > 1)
    conn.open_db("d").alter_schema("t", drop=["a"]).commit()
    with pytest.raises(ConflictError, match=r"replay delete_where on table 't' on version 2") as e:
        a.commit()
    assert "KeyError" in str(e.value)
    assert "open the database again" in str(e.value)
    assert isinstance(e.value.__cause__, KeyError)


def test_a_replayed_alter_db_meta_function_that_fails_is_a_conflict_naming_the_replay(
    conn: merkle.Connection,
) -> None:
    conn.create_db("d", metadata={"owner": "x"}).commit()
    a = conn.open_db("d").alter_db_meta(lambda m: {**m, "owner": m["owner"].upper()})
    conn.open_db("d").alter_db_meta(lambda m: {}).commit()
    with pytest.raises(ConflictError, match=r"replay alter_db_meta on version 1") as e:
        a.commit()
    assert "'owner'" in str(e.value)
    assert "open the database again" in str(e.value)


def test_a_replayed_condition_that_fails_is_a_conflict(conn: merkle.Connection) -> None:
    conn.create_db("d").create_table("t", key="k").write("t", [{"k": 1, "a": 1, "b": 1}]).commit()
    a = conn.open_db("d").upsert("t", [{"k": 1, "b": 2}], condition=lambda o, n: o["a"] < 5)
    conn.open_db("d").alter_schema("t", drop=["a"]).commit()
    with pytest.raises(ConflictError, match="replay an upsert into table 't'"):
        a.commit()


def test_a_replayed_delete_where_expression_error_hides_internal_columns(
    conn: merkle.Connection,
) -> None:
    conn.create_db("d").create_table("t", key="k").write(
        "t", [{"k": i, "a": i} for i in range(3)]
    ).commit()
    a = conn.open_db("d").delete_where("t", pc.field("a") > 1)
    conn.open_db("d").alter_schema("t", rename={"a": "c"}).commit()
    with pytest.raises(ConflictError, match="delete_where") as e:
        a.commit()
    assert "\x00" not in str(e.value)
    assert "row:" not in str(e.value)
    assert "k, c" in str(e.value)


@pytest.mark.parametrize("change", ["write", "update"])
def test_keys_of_another_type_than_a_concurrent_first_write_chose(
    conn: merkle.Connection, change: str
) -> None:
    conn.create_db("d").create_table("t", key="k").commit()
    a = conn.open_db("d")
    a = a.write("t", [{"k": 1, "v": 1}]) if change == "write" else a.update("t", {1: {"v": 1}})
    conn.open_db("d").write("t", [{"k": "x", "v": 1}]).commit()
    with pytest.raises(ConflictError, match="key field's type cannot change") as e:
        a.commit()
    assert "free=" not in str(e.value)
    assert "row 0" not in str(e.value)
    assert "version 2" in str(e.value)


# -- 8. an all-null column of a field added again with another type -------------------------


def test_a_stale_write_not_setting_a_field_dropped_and_added_again_commits(
    conn: merkle.Connection,
) -> None:
    schema = pa.schema([("k", pa.int64()), ("a", pa.int32()), ("b", pa.string())])
    conn.create_db("d").create_table("t", key="k", schema=schema).write(
        "t", [{"k": 1, "a": 1, "b": "x"}]
    ).commit()
    stale = conn.open_db("d").write("t", [{"k": 3, "b": "z"}])
    conn.open_db("d").alter_schema("t", drop=["a"]).alter_schema(
        "t", add={"a": pa.string()}
    ).commit()
    done = stale.commit()
    assert list(done.scan("t")) == [{"k": 1, "b": "x"}, {"k": 3, "b": "z"}]
    assert done.describe_table("t")["schema"].field("a").type == pa.string()


# -- 9. reads: DataFrame bounds and read_tablet fields --------------------------------------


def test_to_pandas_and_to_polars_take_to_arrows_bounds_and_name_themselves(
    conn: merkle.Connection,
) -> None:
    db = _setup(conn)
    assert list(db.to_pandas("t", from_pk=1, to_pk=2)["k"]) == [1, 2]
    assert db.to_polars("t", ["v"], from_pk=3)["k"].to_list() == [3, 4]
    for method in (db.to_pandas, db.to_polars):
        with pytest.raises(TypeError, match=method.__name__):
            method("t", limit=2)  # type: ignore[call-arg]


def test_read_tablet_of_an_unknown_field_is_a_usage_error(conn: merkle.Connection) -> None:
    db = conn.create_db("d").create_table("t", key="k", tablet_size_limit=2)
    db = db.write("t", [{"k": i, "v": i} for i in range(8)]).compact("t").commit()
    tablet = db.list_tablets("t")[0]["id"]
    with pytest.raises(UsageError, match="'nope'"):
        db.read_tablet(tablet, fields=["nope"])
    assert list(db.read_tablet(tablet, fields=["v"])) == [{"k": 0, "v": 0}, {"k": 1, "v": 1}]


def test_a_commit_that_keeps_losing_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """After its last attempt a commit names the way out (it only said it gave up)."""
    import merkle.db.commit as commit_module
    import merkle.db.landing as landing
    from merkle.refs import JournalConflictError

    conn = merkle.connect("memory://")
    db = conn.create_db("d").create_table("t", key="k").commit()

    def always_lost(value: Any, *args: Any) -> Any:
        raise JournalConflictError("d", value.version, value.version + 1)

    monkeypatch.setattr(commit_module, "MAX_COMMIT_ATTEMPTS", 2)
    monkeypatch.setattr(landing, "land_commit", always_lost)
    with pytest.raises(ConflictError, match=r"after 2 attempts.*nothing was committed"):
        db.write("t", [{"k": 1}]).commit()
    assert conn.open_db("d").version == db.version
