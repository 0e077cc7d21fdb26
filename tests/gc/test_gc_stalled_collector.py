"""A collector paused past its lock between its last check and its delete.

A stopped process (SIGSTOP, a paused VM) that held the GC lock loses it when the
lock expires; writers then go on, and one that reuses a block the collector had
decided to delete (a revert) finds it present and refreshes its timestamp. The
collector, resumed, deleted the batch it had decided on before the pause: the
acknowledged head lost blocks. A file store now checks each timestamp where no
writer can refresh it any more (the file moved aside first), so the refreshed
blocks stay. The pause is a hook on the collector's delete; the expiry is the
writer's clock moved past the lock (no waiting).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from gc_helpers import missing_blocks
from test_gc_writer_leases import ROWS_A, WAIT, revert_history

import merkle
from merkle.refs import LeaseManager
from merkle.refs.timing import DEFAULT_SKEW_MARGIN
from tests.conftest import Lake
from tests.refs.helpers import FakeClock

LOCK_TTL = 30.0


def test_a_paused_collector_spares_the_blocks_a_writer_refreshed_meanwhile(
    tmp_path: Path,
) -> None:
    lake = Lake("file", (tmp_path / "lake").as_uri())
    _, v2, only_v1 = revert_history(lake)
    assert only_v1
    paused, resume = threading.Event(), threading.Event()
    outcome: list[Any] = []
    with merkle.connect(lake.uri) as collector, merkle.connect(lake.uri) as writer:
        blocks = collector.blocks
        names = ("delete_many_if_older", "delete_many")  # how a sweep deletes a batch
        real = {name: getattr(blocks, name) for name in names if hasattr(blocks, name)}

        def pausing(name: str) -> Any:
            def hooked(*args: Any, **kwargs: Any) -> Any:
                if not paused.is_set():
                    paused.set()  # the collector stops here, its checks done
                    assert resume.wait(WAIT), "never resumed"
                return real[name](*args, **kwargs)

            return hooked

        for name in real:
            setattr(blocks, name, pausing(name))

        def collect() -> None:
            try:
                outcome.append(merkle.gc(collector, keep_versions=1, grace="0s", lock_ttl=LOCK_TTL))
            except merkle.errors.MerkleError as exc:  # it may find its lock gone afterwards
                outcome.append(exc)

        thread = threading.Thread(target=collect, name="paused-collector")
        thread.start()
        try:
            assert paused.wait(WAIT), "the collector never reached its delete"
            # The writer's clock is past the collector's lock: the lock has expired for it.
            late = FakeClock(time.time() + LOCK_TTL + 2 * DEFAULT_SKEW_MARGIN + 60)
            writer.leases = LeaseManager(writer.store, clock=late, sleep=late.sleep)
            head = writer.open_db("shop").write("t", ROWS_A).commit(message="revert")
            assert head.version == v2.version + 1
        finally:
            resume.set()
            thread.join(WAIT)
        assert not thread.is_alive()
        assert outcome
        with merkle.connect(lake.uri) as reader:
            assert missing_blocks(reader.store, head.root) == []
            rows = reader.open_db("shop").to_arrow("t").to_pylist()
            assert sorted(rows, key=lambda r: r["k"]) == ROWS_A
