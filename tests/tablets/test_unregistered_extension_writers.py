"""A user's extension type written by a process that has not registered it.

The ``merkle`` CLI, or any writer that does not import the application's
``pa.ExtensionType``, sees such a field as its storage type with the
extension's name in the field's metadata. Its writes stored the values as
plain storage, which the registering application then joined with the
extension's own segments as CBOR: its read of the new head failed with
pyarrow's raw "... is not a valid decimal128 number" (types probe, finding
19). A segment now keeps the extension's name, so both processes write the same
bytes; and segments of plain storage already written read as the extension.
"""

from __future__ import annotations

import decimal
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import merkle
from merkle.tablets.evolve import can_widen


class Money(pa.ExtensionType):
    def __init__(self) -> None:
        super().__init__(pa.decimal128(10, 2), "test.unregistered.money")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> Money:
        return cls()


@pytest.fixture(autouse=True)
def _money() -> object:
    pa.register_extension_type(Money())
    yield
    pa.unregister_extension_type("test.unregistered.money")


def _money_column(values: list[str | None]) -> pa.Array:
    storage = pa.array(
        [None if v is None else decimal.Decimal(v) for v in values], Money().storage_type
    )
    return pa.ExtensionArray.from_storage(Money(), storage)


#: Run in a fresh interpreter that never registers Money: one commit of key 2 (records),
#: key 3 (Arrow, its storage type) and key 1's upsert, left pending beside the batch the
#: registered process wrote; "old" makes it write as the old code did.
_WRITER = textwrap.dedent(
    """
    import decimal, sys
    import pyarrow as pa
    import merkle
    from merkle.tablets import conform
    if sys.argv[2] == "old":
        conform.stored_field = lambda field: (
            conform.cbor_field(field.name) if conform.is_free(field)
            else pa.field(field.name, conform.storage_type(field.type)))
    conn = merkle.connect(sys.argv[1])
    db = conn.open_db("e")
    db = db.write("t", [{"k": 2, "m": decimal.Decimal("2.00")}])
    rows = pa.table({"k": [3], "m": pa.array([decimal.Decimal("3.50")], pa.decimal128(10, 2))})
    db = db.write("t", rows)
    db.upsert("t", [{"k": 1, "m": decimal.Decimal("9.99")}]).commit()  # one pending batch
    """
)


@pytest.mark.parametrize("writer", ["current", "old"])
def test_an_unregistered_writer_leaves_the_table_readable(tmp_path: Path, writer: str) -> None:
    lake = tmp_path / "lake"
    with merkle.connect(str(lake)) as conn:
        rows = pa.table({"k": [1], "m": _money_column(["1.25"])})
        conn.create_db("e").create_table("t", key="k").write("t", rows).commit()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", _WRITER, str(lake), writer], check=True, env=env)
    want = pa.table({"k": [1, 2, 3], "m": _money_column(["9.99", "2.00", "3.50"])})
    with merkle.connect(str(lake)) as conn:
        db = conn.open_db("e")
        assert db.to_arrow("t").equals(want)
        assert [r["m"] for r in db.scan("t")] == [
            decimal.Decimal(v) for v in ("9.99", "2.00", "3.50")
        ]
        db = db.compact("t").commit()
        assert db.to_arrow("t").equals(want)
        assert merkle.verify(conn).ok


def test_the_cli_load_of_an_unregistered_type_reads_in_the_application(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with merkle.connect(str(lake)) as conn:
        rows = pa.table({"k": [1], "m": _money_column(["1.25"])})
        conn.create_db("e").create_table("t", key="k").write("t", rows).commit()
    source = tmp_path / "more.jsonl"
    source.write_text(json.dumps({"k": 2, "m": "1.00"}) + "\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "merkle.cli.main", "--lake", str(lake), "load", "e", "t"]
    subprocess.run([*command, str(source)], check=True, env=env, capture_output=True)
    with merkle.connect(str(lake)) as conn:
        got = conn.open_db("e").to_arrow("t")
    assert got.equals(pa.table({"k": [1, 2], "m": _money_column(["1.25", "1.00"])}))


def test_both_processes_write_the_same_segment(tmp_path: Path) -> None:
    """Equal rows make equal blocks whether or not the writer knows the type."""
    lake = tmp_path / "lake"
    with merkle.connect(str(lake)) as conn:
        rows = pa.table({"k": [1], "m": _money_column(["1.25"])})
        db = conn.create_db("e").create_table("t", key="k").write("t", rows).commit()
        conn.create_db("f", root=db)
        conn.open_db("e").write("t", [{"k": 2, "m": decimal.Decimal("2.00")}]).commit()
    script = textwrap.dedent(
        """
        import decimal, sys, merkle
        conn = merkle.connect(sys.argv[1])
        conn.open_db("f").write("t", [{"k": 2, "m": decimal.Decimal("2.00")}]).commit()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", script, str(lake)], check=True, env=env)
    with merkle.connect(str(lake)) as conn:
        e, f = conn.open_db("e"), conn.open_db("f")
        assert e.entry.root != f.entry.root or e.to_arrow("t").equals(f.to_arrow("t"))
        assert [t["cid"] for t in e.list_tablets("t")] == [t["cid"] for t in f.list_tablets("t")]
        assert e.diff(f, table="t")["t"].counts().updated == 0


def test_widening_checks_take_an_unhashable_extension_type() -> None:
    """A diff of a segment of the extension against one of its plain storage asks whether
    one type widens to the other: that check hashed the types (TypeError for Money,
    which defines no ``__hash__``; api.md says such a type works)."""
    assert not can_widen(Money(), Money().storage_type)
    assert not can_widen(Money().storage_type, Money())
