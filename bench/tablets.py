"""Tablets layer: bulk build and full scan, beside plain pyarrow on the same table.

The same sorted table (shuffled int64 key, short string, float,
low-cardinality string, timestamp) is written and read back by merkle-db's
tablet layer on a file store (segments, tablets, index nodes, every block
hashed and fsynced) and by pyarrow as one Arrow IPC file (zstd level 3, the
segments' codec) and one Parquet file (pyarrow's defaults). The ratio to
plain pyarrow is the overhead of the layer. The three take turns, so they see
the same background load; each number is the median of the runs. A build
from the same rows unsorted (merkle sorts them) and a build without fsync are
shown too.

Run: ``python -m bench tablets [--quick]``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from bench.common import fmt_rows, markdown_table, temp_dir, time_interleaved
from merkle.blocks.store import BlockStore
from merkle.storage.file import FileStore
from merkle.tablets.segment import SEGMENT_CODEC
from merkle.tablets.store import TableStore
from merkle.tablets.table import Table

__all__ = ["make_table", "run"]

TARGET = 1.5


def make_table(rows: int, seed: int = 7) -> pa.Table:
    """The benchmark table: shuffled int64 key and four typical columns."""
    rng = np.random.default_rng(seed)
    keys = rng.permutation(rows).astype(np.int64)
    statuses = np.array(["new", "paid", "shipped", "delivered", "returned"])
    start = np.datetime64("2026-01-01T00:00:00", "us")
    return pa.table(
        {
            "id": keys,
            "name": pa.array(np.char.add("user-", (keys % 100_003).astype(str))),
            "score": rng.random(rows),
            "status": pa.array(statuses[keys % len(statuses)]),
            "at": pa.array(start + keys.astype("timedelta64[s]")).cast(
                pa.timestamp("us", tz="UTC")
            ),
        }
    )


class _Runner:
    """Builds and scans in fresh directories, one per attempt."""

    def __init__(self, root: Path, table: pa.Table, shuffled: pa.Table) -> None:
        self.root = root
        self.table = table
        self.shuffled = shuffled
        self.attempt = 0
        self.last: dict[str, Any] = {}

    def _dir(self, name: str) -> Path:
        self.attempt += 1
        path = self.root / f"{name}-{self.attempt}"
        return path

    def merkle_build(self, data: pa.Table, *, fsync: bool = True) -> Callable[[int], None]:
        def build(_: int) -> None:
            path = self._dir("merkle")
            ts = TableStore(BlockStore(FileStore(str(path), fsync=fsync)))
            table = Table.new(ts, key_field="id").write(data, version=1)
            self.last["merkle"] = (path, table.save())
            ts.close()

        return build

    def ipc_build(self, _: int) -> None:
        path = self._dir("ipc")
        path.mkdir()
        options = ipc.IpcWriteOptions(compression=SEGMENT_CODEC)
        with (
            pa.OSFile(str(path / "table.arrow"), "wb") as sink,
            ipc.new_file(sink, self.table.schema, options=options) as writer,
        ):
            writer.write_table(self.table, max_chunksize=100_000)
        self.last["ipc"] = path

    def parquet_build(self, _: int) -> None:
        path = self._dir("parquet")
        path.mkdir()
        pq.write_table(self.table, str(path / "table.parquet"))
        self.last["parquet"] = path

    def merkle_scan(self, _: int) -> None:
        path, cid = self.last["merkle"]
        ts = TableStore(BlockStore(FileStore(str(path))))  # cold caches
        assert Table.load(ts, cid).to_arrow().num_rows == self.table.num_rows
        ts.close()

    def ipc_scan(self, _: int) -> None:
        with pa.memory_map(str(self.last["ipc"] / "table.arrow")) as source:
            assert ipc.open_file(source).read_all().num_rows == self.table.num_rows

    def parquet_scan(self, _: int) -> None:
        assert (
            pq.read_table(str(self.last["parquet"] / "table.parquet")).num_rows
            == self.table.num_rows
        )

    def cleanup(self) -> None:
        for child in self.root.iterdir():
            shutil.rmtree(child, ignore_errors=True)


def _measure(rows: int, runs: int) -> list[list[str]]:
    shuffled = make_table(rows)
    table = shuffled.sort_by("id")
    out = []
    with temp_dir("merkle-bench-tablets-") as root:
        runner = _Runner(root, table, shuffled)
        build = time_interleaved(
            {
                "merkle": runner.merkle_build(table),
                "ipc": runner.ipc_build,
                "parquet": runner.parquet_build,
            },
            range(runs),
        )
        scan = time_interleaved(
            {"merkle": runner.merkle_scan, "ipc": runner.ipc_scan, "parquet": runner.parquet_scan},
            range(runs),
        )
        runner.cleanup()
        extra = time_interleaved(
            {
                "unsorted": runner.merkle_build(shuffled),
                "nofsync": runner.merkle_build(table, fsync=False),
            },
            range(max(1, runs - 1)),
        )
        runner.cleanup()
    b = {k: v.median for k, v in build.items()}
    s = {k: v.median for k, v in scan.items()}
    best_build, best_scan = min(b["ipc"], b["parquet"]), min(s["ipc"], s["parquet"])
    for label, m, i, p, best in (
        ("bulk build", b["merkle"], b["ipc"], b["parquet"], best_build),
        ("full scan to Arrow", s["merkle"], s["ipc"], s["parquet"], best_scan),
    ):
        ratio = m / best
        out.append(
            [
                f"{rows:,} rows: {label}",
                fmt_rows(rows, m),
                fmt_rows(rows, i),
                fmt_rows(rows, p),
                f"{m / i:.2f}x / {m / p:.2f}x",
                f"{ratio:.2f}x {'(met)' if ratio <= TARGET else '(missed)'}",
            ]
        )
    unsorted, nofsync = extra["unsorted"].median, extra["nofsync"].median
    out.append(
        [
            f"{rows:,} rows: build from unsorted rows / without fsync",
            f"{fmt_rows(rows, unsorted)} / {fmt_rows(rows, nofsync)}",
            "",
            "",
            "",
            "",
        ]
    )
    return out


def run(quick: bool) -> str:
    """Measure and return the Markdown section."""
    sizes = [100_000] if quick else [1_000_000, 10_000_000]
    rows: list[list[str]] = []
    for size in sizes:
        rows += _measure(size, runs=2 if quick else 3)
    table = markdown_table(
        [
            "operation",
            "merkle-db",
            "Arrow IPC file",
            "Parquet file",
            "merkle / IPC, / Parquet",
            f"merkle / better (aim <= {TARGET}x)",
        ],
        rows,
    )
    return (
        "## Tablets: bulk build and full scan\n\n"
        "The same sorted table written and read by the tablet layer on a file store "
        "(10 tablets per million rows, every block hashed with BLAKE3 and fsynced) and by "
        "pyarrow as one file (IPC with zstd level 3; Parquet with pyarrow's defaults; "
        "neither fsyncs). Scans start with cold merkle caches (the OS page cache is warm "
        "for all three). Median of interleaved runs.\n\n" + table + "\n"
    )
