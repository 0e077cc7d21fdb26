"""A reader lease released while the renewing thread renews it stays released.

Renewing checks that the lease object exists, then writes it again; a release
(the end of a ``with`` block, ``db.release()``) that ran between the two was
undone: the lease object came back and kept its version from collections until
it expired (threads probe of the twenty-third session: 8 threads opening a
leased version 480 times left lease objects behind). A release now waits for
a renewal in progress.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import merkle


def test_a_release_during_a_renewal_is_not_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with merkle.connect(f"file://{tmp_path}") as conn:
        db = conn.create_db("x").create_table("t", key="k").write("t", [{"k": 1}]).commit()
        db.write("t", [{"k": 2}]).commit()
        value = conn.open_db("x", version=1, lease=True)
        handle = value._reader
        assert handle is not None
        key = handle.lease.key
        store = conn.leases.store
        real_exists = store.exists
        releasing: list[threading.Thread] = []

        def exists_then_release(checked: str) -> Any:
            found = real_exists(checked)
            if checked == key and not releasing:
                # The release a with block's end makes, from another thread, between the
                # renewal's check and its write: given a moment to finish if it can.
                releasing.append(threading.Thread(target=value.release))
                releasing[0].start()
                releasing[0].join(0.5)
            return found

        monkeypatch.setattr(store, "exists", exists_then_release)
        conn._readers.renew(handle)
        monkeypatch.undo()
        releasing[0].join(10)
        assert handle.released
        assert [lease.key for lease in conn.leases.lease_holders("reader")] == []
