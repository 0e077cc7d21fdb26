"""An interrupt while a block is decoded is an interrupt, not a damaged block.

cbor2 wraps whatever a tag hook raises in ``CBORDecodeError``, and the codec
made every such error an ``IntegrityError`` ("malformed DAG-CBOR block", or
"journal object ... is damaged ... restore it from a backup"): a Ctrl-C that
landed while a link was decoded told the user to restore an intact lake from a
backup (threads probe of the twenty-third session). KeyboardInterrupt,
SystemExit and MemoryError now come out as themselves.
"""

from __future__ import annotations

from typing import Any

import pytest

import merkle
import merkle.blocks.codec as codec
from merkle.blocks.cid import CID
from merkle.errors import IntegrityError


def _node() -> bytes:
    link = CID.of(b"some block", codec="raw")
    return codec.encode_node({"a": link, "b": [link, 1]})


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit, MemoryError])
def test_an_interrupt_in_a_link_hook_comes_out_as_itself(
    monkeypatch: pytest.MonkeyPatch, raised: type[BaseException]
) -> None:
    data = _node()

    def interrupted(*args: Any) -> CID:
        raise raised

    monkeypatch.setattr(codec, "CID", interrupted)
    with pytest.raises(raised):
        codec.decode_node(data)
    monkeypatch.undo()
    assert codec.decode_node(data)["b"][1] == 1  # the block itself was fine


def test_a_bad_link_is_still_an_integrity_error() -> None:
    data = _node().replace(b"\xd8\x2a\x58\x25\x00", b"\xd8\x2a\x58\x25\x07", 1)
    with pytest.raises(IntegrityError):
        codec.decode_node(data)


def test_ctrl_c_while_the_journal_is_read_leaves_the_connection_usable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with merkle.connect("memory://") as conn:
        conn.create_db("x").create_table("t", key="k").write("t", [{"k": 1}]).commit()
        real = codec.CID
        armed = [True]

        def once(*args: Any) -> CID:
            if armed[0]:
                armed[0] = False
                raise KeyboardInterrupt
            return real(*args)

        monkeypatch.setattr(codec, "CID", once)
        with pytest.raises(KeyboardInterrupt):
            conn.history("x")
        monkeypatch.undo()
        assert len(conn.history("x")) == 2
        assert merkle.verify(conn).ok
