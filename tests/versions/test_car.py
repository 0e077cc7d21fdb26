"""CAR v1 export and import: exact format, read by the IPLD project's JavaScript tools."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Lake
from multiformats import varint

import merkle
from merkle.blocks.cid import CID
from merkle.blocks.codec import decode_node
from merkle.blocks.walk import walk_levels
from merkle.errors import IntegrityError, UsageError
from merkle.transfer import export_car, import_car, read_car

TOOL = Path(__file__).resolve().parents[2] / "tools" / "ipld-car"


@pytest.fixture
def conn(lake: Lake) -> Iterator[merkle.Connection]:
    with merkle.connect(lake.uri, **lake.options) as opened:
        yield opened


def _shop(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=100, schema_free=True)
    db = db.write("t", [{"id": i, "v": i % 3, "s": f"r{i}"} for i in range(1000)]).compact()
    db = db.write("t", [{"id": 5, "v": "pending"}]).commit()  # a pending batch too
    return db


def _reachable(conn: merkle.Connection, root: str) -> set[CID]:
    return {c for level in walk_levels(conn.blocks, [CID.parse(root)], set()) for c in level}


def test_export_holds_every_reachable_block_exactly_once_and_imports_back(
    conn: merkle.Connection, tmp_path: Path
) -> None:
    db = _shop(conn)
    path = tmp_path / "shop.car"
    report = export_car(conn, "shop", path)
    data = path.read_bytes()
    # The header: varint length, then DAG-CBOR {roots: [root], version: 1}.
    size, n, _ = varint.decode_raw(data[:10])
    header = decode_node(data[n : n + size], strict=True)
    assert header == {"roots": [CID.parse(db.root)], "version": 1}
    with path.open("rb") as handle:
        root, blocks = read_car(handle, str(path))
        cids = [cid for cid, _ in blocks]
    assert str(root) == db.root
    assert len(cids) == len(set(cids)) == report.blocks
    assert set(cids) == _reachable(conn, db.root)
    with merkle.connect("memory://") as other:
        copy = import_car(other, path, "copy")
        assert copy.root == db.root
        assert copy.version == 0
        assert list(copy.scan("t")) == list(db.scan("t"))
        assert merkle.verify(other).ok


@pytest.mark.parametrize(
    "damage", ["flip a data byte", "drop a block", "truncate", "two roots", "bad version"]
)
def test_import_refuses_a_damaged_file_and_stores_nothing(tmp_path: Path, damage: str) -> None:
    with merkle.connect("memory://") as src:
        _shop(src)
        buffer = io.BytesIO()
        export_car(src, "shop", buffer)
    data = bytearray(buffer.getvalue())
    size, n, _ = varint.decode_raw(bytes(data[:10]))
    body = data[n + size :]
    if damage == "flip a data byte":
        data[-3] ^= 0xFF
    elif damage == "drop a block":
        first, m, _ = varint.decode_raw(bytes(body[:10]))  # the root section
        second, k, _ = varint.decode_raw(bytes(body[m + first : m + first + 10]))
        start = n + size + m + first
        del data[start : start + k + second]
    elif damage == "truncate":
        del data[-7:]
    else:
        root = decode_node(bytes(data[n : n + size]))["roots"][0]
        header = (
            {"roots": [root, root], "version": 1}
            if damage == "two roots"
            else {"roots": [root], "version": 2}
        )
        from merkle.blocks.codec import encode_node

        encoded = encode_node(header)
        data = bytearray(varint.encode(len(encoded)) + encoded + body)
    path = tmp_path / "bad.car"
    path.write_bytes(bytes(data))
    with merkle.connect("memory://") as dst:
        with pytest.raises(IntegrityError):
            import_car(dst, path, "copy")
        assert dst.list_dbs() == []
        assert list(dst.blocks.list()) == []  # checked before anything is stored


def test_import_needs_a_new_name(tmp_path: Path) -> None:
    with merkle.connect("memory://") as conn:
        _shop(conn)
        export_car(conn, "shop", tmp_path / "s.car")
        with pytest.raises(UsageError, match="already exists"):
            import_car(conn, tmp_path / "s.car", "shop")


@pytest.mark.skipif(
    shutil.which("node") is None or not (TOOL / "node_modules" / "@ipld" / "car").exists(),
    reason="the IPLD JavaScript tools are installed by `make test` when npm is available",
)
@pytest.mark.parametrize("hash", ["blake3", "sha2-256"])
def test_the_ipld_projects_car_library_reads_the_export_and_writes_it_back_identically(
    tmp_path: Path, hash: str
) -> None:
    with merkle.connect(tmp_path / "lake", hash=hash) as conn:
        db = _shop(conn)
        path, again = tmp_path / "shop.car", tmp_path / "again.car"
        export_car(conn, "shop", path)
        out = subprocess.run(
            ["node", str(TOOL / "check.mjs"), str(path), str(again)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        seen = json.loads(out.stdout)
        assert seen["roots"] == [db.root]
        assert {b["cid"] for b in seen["blocks"]} == {str(c) for c in _reachable(conn, db.root)}
        assert all(b["canonical"] for b in seen["blocks"] if b["codec"] == 0x71)
        if hash == "sha2-256":
            assert all(b["hashOk"] for b in seen["blocks"])
        assert again.read_bytes() == path.read_bytes()  # @ipld/car's writer: the same bytes
        with merkle.connect("memory://") as other:
            assert import_car(other, again, "copy").root == db.root
