"""Bad arguments get merkle's own errors, early, naming the argument (found by a fuzzing probe).

What the probe found:

- a timestamp with an unknown time zone was accepted by schemas, ``alter_schema(add=)``
  and Arrow writes, and every later read as records raised a raw pytz error;
- a ``pd.Timestamp`` with nanoseconds lost them in a timestamp[us] field, ``np.bool_``
  went into an int field as 1, ``pd.NaT`` raised a raw ValueError;
- ``alter_schema(drop={...})`` (a mapping) changed nothing, ``drop=5``, ``widen=5`` raw errors;
- ``connect(workers=0, cache_bytes=nan, ...)``, NUL or surrogate lake paths: raw errors late
  (and a traceback from ``merkle -o workers=0``);
- ``sync(version=True)`` synced version 1; ``export_car(out=None)`` AttributeError;
- ``merge(x, x, base="garbage")`` and ``merkle merge --base 99`` went unchecked;
- ``fields=1`` raw TypeError; ``scan(reverse="no")`` scanned backwards; numpy arrays as
  ``history(limit=)``, ``hash=``, ``lease=``, ``resolve=`` or key values raised raw errors;
- ``gc(lock_ttl=nan, writer_wait=-1)`` accepted.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner

import merkle
import merkle.tablets.schema as schema_module
from merkle.cli.main import cli
from merkle.errors import MerkleError, SchemaError, UsageError
from merkle.transfer import export_car, import_car

MARS = pa.timestamp("us", tz="Mars/Base")


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as c:
        c.create_db("d").create_table("t", key="id").write(
            "t", [{"id": i, "a": i, "s": "x"} for i in range(5)]
        ).commit()
        yield c


@pytest.fixture
def lake(tmp_path: Path) -> str:
    path = str(tmp_path / "lake")
    with merkle.connect(path) as c:
        c.create_db("d").create_table("t", key="id", tablet_size_limit=100).write(
            "t", [{"id": i, "a": i} for i in range(300)]
        ).compact().commit()
    return path


class _Raises:
    """A value whose comparison raises, as some user types' do."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing")

    __hash__ = object.__hash__


def _anything(value: object) -> Any:
    """``value`` typed as anything: these tests pass what the signatures do not allow."""
    return value


def _run(lake: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--lake", lake, *args])


def _one_line_error(result: Any) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), result.output
    return str(lines[0])


# -- 1. unknown time zones -------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    [MARS, pa.struct([("at", MARS)]), pa.list_(MARS), pa.map_(pa.string(), MARS)],
    ids=["top", "struct", "list", "map"],
)
def test_unknown_time_zone_refused_in_a_declared_schema(
    conn: merkle.Connection, kind: pa.DataType
) -> None:
    schema = pa.schema([("id", pa.int64()), ("ts", kind)])
    with pytest.raises(SchemaError, match="'Mars/Base' is unknown"):
        conn.open_db("d").create_table("e", key="id", schema=schema)


def test_unknown_time_zone_refused_by_alter_schema(conn: merkle.Connection) -> None:
    db = conn.open_db("d")
    with pytest.raises(SchemaError, match="Mars/Base"):
        db.alter_schema("t", add=[("ts", MARS)])
    with pytest.raises(SchemaError, match="Mars/Base"):
        db.alter_schema("t", add={"ts": pa.list_(MARS)})


def test_unknown_time_zone_refused_from_arrow_data(conn: merkle.Connection) -> None:
    data = pa.table({"id": [9], "ts": pa.array([0], MARS)})
    with pytest.raises(SchemaError, match="Mars/Base"):
        conn.open_db("d").write("t", data)
    nested = pa.table({"id": [9], "n": pa.array([{"at": 0}], pa.struct([("at", MARS)]))})
    with pytest.raises(SchemaError, match="Mars/Base"):
        conn.open_db("d").write("t", nested)


def test_known_time_zones_still_accepted(conn: merkle.Connection) -> None:
    kinds = {
        "utc": pa.timestamp("us", tz="UTC"),
        "ny": pa.timestamp("us", tz="America/New_York"),
        "off": pa.timestamp("ms", tz="+05:30"),
        "naive": pa.timestamp("us"),
    }
    data = pa.table({"id": [9], **{n: pa.array([0], k) for n, k in kinds.items()}})
    db = conn.open_db("d").write("t", data).commit()
    assert db.get_records("t", [9])[9]["ny"] == datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def test_a_stored_unknown_time_zone_reads_as_a_merkle_error(
    conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table written before such zones were refused: reads say so, Arrow reads work."""
    with monkeypatch.context() as patch:
        patch.setattr(schema_module, "unknown_time_zone", lambda kind: None, raising=False)
        schema = pa.schema([("id", pa.int64()), ("ts", MARS)])
        conn.open_db("d").create_table("e", key="id", schema=schema).write(
            "e", pa.table({"id": [1], "ts": pa.array([0], MARS)})
        ).commit()
    db = conn.open_db("d")
    with pytest.raises(UsageError, match="unknown time zone 'Mars/Base'"):
        list(db.scan("e"))
    with pytest.raises(UsageError, match="unknown time zone 'Mars/Base'"):
        db.get_records("e", [1])
    with pytest.raises(UsageError, match="unknown time zone 'Mars/Base'"):
        db.to_pandas("e")  # a raw pytz error before
    assert db.to_arrow("e").num_rows == 1


def test_cli_schema_with_unknown_time_zone(tmp_path: Path) -> None:
    path = str(tmp_path / "lake")
    assert _run(path, "db", "create", "d").exit_code == 0
    result = _run(
        path,
        "table",
        "create",
        "d",
        "e",
        "--key",
        "id",
        "--schema",
        "id:int64,ts:timestamp[us, tz=Mars/Base]",
    )
    assert "Mars/Base" in _one_line_error(result)


# -- 2. numpy and pandas scalars in records --------------------------------------

NANO = pd.Timestamp("2026-01-01 00:00:00.000000001")


def test_pandas_nanoseconds_refused_for_a_new_field(conn: merkle.Connection) -> None:
    with pytest.raises(SchemaError, match="nanoseconds"):
        conn.open_db("d").write("t", [{"id": 51, "x": NANO}])


def test_pandas_nanoseconds_refused_for_a_microsecond_field(conn: merkle.Connection) -> None:
    db = conn.open_db("d").write("t", [{"id": 50, "x": datetime.datetime(2026, 1, 1)}]).commit()
    with pytest.raises(SchemaError, match="nanoseconds"):
        db.write("t", [{"id": 52, "x": NANO}])
    with pytest.raises(SchemaError, match="nanoseconds"):
        db.write("t", [{"id": 52, "d": pd.Timedelta(1)}])


def test_pandas_nanoseconds_kept_in_a_nanosecond_field(conn: merkle.Connection) -> None:
    db = conn.open_db("d").alter_schema("t", add=[("x", pa.timestamp("ns"))])
    db = db.write("t", [{"id": 52, "x": NANO}, {"id": 53, "x": pd.Timestamp("2026-01-02")}])
    column = db.commit().to_arrow("t", fields=["x"]).column("x")
    assert column.cast(pa.int64()).to_pylist()[-2] == NANO.value


def test_numpy_bool_is_a_bool(conn: merkle.Connection) -> None:
    db = conn.open_db("d")
    with pytest.raises(SchemaError, match="'a' is int64"):
        db.write("t", [{"id": 53, "a": np.bool_(True)}])
    db = db.write("t", [{"id": 54, "flag": np.bool_(True)}]).commit()
    assert db.get_records("t", [54])[54]["flag"] is True
    assert db.describe_table("t")["schema"].field("flag").type == pa.bool_()


def test_pandas_nat_is_null(conn: merkle.Connection) -> None:
    db = conn.open_db("d").write("t", [{"id": 55, "when": pd.NaT}]).commit()
    assert "when" not in db.describe_table("t")["schema"].names
    db = db.write("t", [{"id": 56, "when": datetime.datetime(2026, 1, 1)}]).commit()
    db = db.write("t", [{"id": 57, "when": pd.NaT}, {"id": 58, "when": NANO.floor("us")}])
    assert db.commit().get_records("t", [57]) == {57: {"id": 57}}


# -- 3. alter_schema arguments ---------------------------------------------------


@pytest.mark.parametrize("part", ["drop", "nullable", "free"])
def test_alter_schema_refuses_a_mapping_for_names(conn: merkle.Connection, part: str) -> None:
    with pytest.raises(SchemaError, match=f"{part} takes a list of field names"):
        conn.open_db("d").alter_schema("t", **_anything({part: {"s": True}}))
    assert conn.open_db("d").version == 1


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"drop": 5}, "drop takes a list"),
        ({"add": True}, "add takes a list"),
        ({"widen": 5}, "widen takes a mapping"),
        ({"widen": "ab"}, "widen takes a mapping"),
        ({"widen": [("a", "int64")]}, "widen takes a mapping"),
    ],
)
def test_alter_schema_refuses_other_forms(
    conn: merkle.Connection, arguments: dict[str, Any], match: str
) -> None:
    with pytest.raises(SchemaError, match=match):
        conn.open_db("d").alter_schema("t", **arguments)


def test_alter_schema_still_takes_lists_and_mappings(conn: merkle.Connection) -> None:
    db = conn.open_db("d").alter_schema("t", add={"n": "int32"}, drop=["s"], free="a")
    db = db.alter_schema("t", widen={"n": pa.int64()}).commit()
    schema = db.describe_table("t")["schema"]
    assert schema.names == ["id", "a", "n"]
    assert schema.field("n").type == pa.int64()


# -- 4, 5. connect -----------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, -1, "x", True, 1.5, None, np.array([1, 2])])
def test_connect_workers_checked(workers: Any) -> None:
    with pytest.raises(UsageError, match="workers"):
        merkle.connect("memory://", workers=workers)


@pytest.mark.parametrize("cache", [None, float("nan"), float("inf"), -5, 1.5, "abc", True])
def test_connect_cache_bytes_checked(cache: Any) -> None:
    with pytest.raises(UsageError, match="cache_bytes"):
        merkle.connect("memory://", cache_bytes=cache)


def test_connect_takes_the_text_of_an_option(lake: str) -> None:
    with merkle.connect(
        lake, workers=_anything("2"), cache_bytes=_anything("1000000"), create=False
    ) as c:
        assert c.open_db("d").to_arrow("t").num_rows == 300
    with merkle.connect(lake, workers=_anything(np.int64(2)), cache_bytes=0, create=False) as c:
        assert c.open_db("d").to_arrow("t").num_rows == 300


@pytest.mark.parametrize(
    "option", ["workers=0", "workers=abc", "cache_bytes=abc", "cache_bytes=1.5"]
)
def test_cli_options_checked(lake: str, option: str) -> None:
    name = option.split("=")[0]
    assert name in _one_line_error(_run(lake, "-o", option, "scan", "d", "t"))


def test_cli_option_as_a_number(lake: str) -> None:
    assert _run(lake, "-o", "workers=2", "-o", "cache_bytes=1e9", "scan", "d", "t").exit_code == 0


@pytest.mark.parametrize("name", ["a\x00b", "\ud800"], ids=["nul", "surrogate"])
def test_lake_path_the_file_system_cannot_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError, match="lake path"):
        merkle.connect(str(tmp_path) + "/" + name)


def test_hash_history_and_lease_checked(conn: merkle.Connection) -> None:
    with pytest.raises(UsageError, match="hash="):
        merkle.connect("memory://", hash=_anything(np.array(["blake3", "x"])))
    with pytest.raises(UsageError, match="limit"):
        conn.history("d", limit=_anything(np.array([1, 2])))
    with pytest.raises(UsageError, match="limit"):
        conn.history("d", limit=-1)
    assert len(conn.history("d", limit=_anything(np.int64(1)))) == 1
    for lease in ("no", np.array([True, False]), _Raises()):
        with pytest.raises(UsageError, match="lease"):
            conn.open_db("d", lease=_anything(lease))
    with conn.open_db("d", lease=_anything(np.bool_(True))) as db:
        assert db.version == 1


# -- 6, 7. sync and CAR files ------------------------------------------------------


@pytest.mark.parametrize("version", [True, "1", -1, 1.0])
def test_sync_version_checked(conn: merkle.Connection, version: Any) -> None:
    with merkle.connect("memory://") as other:
        with pytest.raises(UsageError, match="version"):
            merkle.sync(conn, other, "d", version=version)
        assert other.list_dbs() == []


@pytest.mark.parametrize("out", [None, 5, object()])
def test_export_car_needs_a_path_or_a_file(conn: merkle.Connection, out: Any) -> None:
    with pytest.raises(UsageError, match="export_car"):
        export_car(conn, "d", out)


@pytest.mark.parametrize("name", ["a\x00b.car", "\ud800.car"], ids=["nul", "surrogate"])
def test_car_paths_the_file_system_cannot_name(
    conn: merkle.Connection, tmp_path: Path, name: str
) -> None:
    path = str(tmp_path) + "/" + name
    with pytest.raises(UsageError, match="export_car"):
        export_car(conn, "d", path)
    with pytest.raises(UsageError, match="import_car"):
        import_car(conn, path, "x")
    assert "x" not in conn.list_dbs()


def test_car_round_trip_still_works(conn: merkle.Connection, tmp_path: Path) -> None:
    path = tmp_path / "d.car"
    export_car(conn, "d", path)
    assert os.path.getsize(path) > 0
    assert import_car(conn, str(path), "x").to_arrow("t").num_rows == 5


# -- 8. merge base -----------------------------------------------------------------


@pytest.mark.parametrize("base", ["garbage", 99, 1.5])
def test_merge_checks_base_with_nothing_to_merge(conn: merkle.Connection, base: Any) -> None:
    with pytest.raises(MerkleError, match=r"99|base"):
        conn.merge("d", "d", base=base)


def test_cli_merge_checks_base(lake: str) -> None:
    assert "99" in _one_line_error(_run(lake, "merge", "d", "d", "--base", "99"))


def test_merge_resolve_array(conn: merkle.Connection) -> None:
    with pytest.raises(UsageError, match="resolve"):
        conn.merge("d", "d", resolve=_anything(np.array(["ours", "x"])))


# -- 9, 10. fields, flags, key values -------------------------------------------------


@pytest.mark.parametrize("fields", [1, True, 1.5, b"ab", {"a": 1}])
def test_fields_must_be_a_list_of_names(conn: merkle.Connection, fields: Any) -> None:
    db = conn.open_db("d")
    for read in (
        lambda: db.get_records("t", [1], fields=fields),
        lambda: list(db.scan("t", fields=fields)),
        lambda: db.to_arrow("t", fields=fields),
        lambda: db.to_batches("t", fields=fields),
        lambda: db.diff(0, fields=fields),
    ):
        with pytest.raises(UsageError, match="fields must be a list"):
            read()


@pytest.mark.parametrize("reverse", ["no", 1, None, np.array([True, False])])
def test_scan_reverse_must_be_a_bool(conn: merkle.Connection, reverse: Any) -> None:
    with pytest.raises(UsageError, match="reverse"):
        list(conn.open_db("d").scan("t", reverse=reverse))


def test_scan_reverse_takes_a_numpy_bool(conn: merkle.Connection) -> None:
    ids = [r["id"] for r in conn.open_db("d").scan("t", reverse=_anything(np.bool_(True)))]
    assert ids == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("odd", [np.array([1, 2]), _Raises()], ids=["array", "raising-eq"])
def test_composite_key_values_that_do_not_compare(conn: merkle.Connection, odd: Any) -> None:
    db = conn.open_db("d").create_table("c", key=["g", "n"])
    with pytest.raises(UsageError):
        db.write("c", {("a", 1): {"g": "a", "n": odd}})
    with pytest.raises(MerkleError):
        db.write("c", [{"g": "a", "n": odd}])


# -- gc ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"lock_ttl": float("nan")},
        {"lock_ttl": 0},
        {"writer_wait": -1},
        {"writer_wait": "1"},
        {"dry_run": "no"},
    ],
)
def test_gc_timings_checked(conn: merkle.Connection, arguments: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match=next(iter(arguments))):
        merkle.gc(conn, **arguments)


# -- arguments of Database methods (the second half of the probe's findings) ----------


@pytest.fixture
def shop() -> merkle.Database:
    conn = merkle.connect("memory://")
    return conn.create_db("d").create_table("t", key="id").write("t", [{"id": 1}]).commit()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda d: d.create_table("n", key="id", key_codec=5), "key_codec of table 'n'"),
        (lambda d: d.create_table("n", key="id", families="ab"), "families of table 'n'"),
        (lambda d: d.alter_families("t", None), "alter_families of table 't'"),
        (lambda d: d.alter_families("t", 5), "families of table 't'"),
        (lambda d: d.alter_db_meta({"x": 1}), "alter_db_meta: fn must be a function"),
        (lambda d: d.alter_table_meta("t", None), "alter_table_meta of table 't': fn"),
        (lambda d: d.has_table(["t"]), "a table name is a string"),
        (lambda d: d.has_table(None), "a table name is a string"),
        (lambda d: d.build_table("t", ""), "tablet_ids must be a list of strings"),
        (lambda d: d.build_table("t", None), "tablet_ids must be a list of strings"),
        (lambda d: d.upsert("t", None), "records for table 't'"),
        (lambda d: d.upsert("t", [{"id": 2}], when_matched=["update"]), "when_matched"),
        (lambda d: d.diff(0, table=["t"]), "table must be a table name"),
    ],
)
def test_database_arguments_are_checked(
    shop: merkle.Database, call: Callable[[merkle.Database], object], match: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(match)):
        call(shop)
    assert shop.get_records("t", [1]) == {1: {"id": 1}}  # nothing changed


def test_a_stray_tablet_read_names_its_fields(shop: merkle.Database) -> None:
    """A tablet no table holds (here: of a dropped table) ignored an unknown field."""
    db = shop.compact("t").commit()
    (tablet,) = db.list_tablets("t")
    stray = db.drop_table("t")
    assert list(stray.read_tablet(tablet["id"], fields=["id"])) == [{"id": 1}]
    with pytest.raises(UsageError, match=r"has no field 'nope'; its fields: id"):
        list(stray.read_tablet(tablet["id"], fields=["nope"]))


@pytest.mark.parametrize(
    ("value", "fsync"), [("false", False), ("TRUE", True), (0, False), (True, True)]
)
def test_file_store_flags_read_as_written(tmp_path: Path, value: object, fsync: bool) -> None:
    """``-o fsync=false`` arrives as the text "false", which Python takes for true."""
    from merkle.storage import open_store

    with open_store(str(tmp_path / "lake"), fsync=value) as store:
        assert store.reopen_options()["fsync"] is fsync


@pytest.mark.parametrize(("name", "value"), [("fsync", "maybe"), ("bulk_workers", 0)])
def test_file_store_options_are_checked(tmp_path: Path, name: str, value: object) -> None:
    from merkle.storage import open_store

    with pytest.raises(UsageError, match=name):
        open_store(str(tmp_path / "lake"), **{name: value})
