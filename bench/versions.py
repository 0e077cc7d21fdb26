"""Versions as data: diff of a few changed records in a large table, and push to S3.

* **diff**: a table of 10,000,000 rows (200,000 with ``--quick``) in a file
  lake, then a version that changes 100 neighbouring records (compacted into
  the tablets) and one that changes 100 records anywhere (a pending batch).
  ``db.diff`` is timed cold (a new connection each run: no decoded block
  cached; the OS page cache is warm) beside reading both versions in full
  (``to_arrow`` of each, cold too); blocks and bytes read are counted.
* **push**: 1,000,000 rows (100,000 quick) from a file lake to a moto S3
  lake on 127.0.0.1 with ``merkle.sync``, beside an ``aws s3 sync``-style
  copy of the same block files with boto3 (10 threads, one PUT per file,
  as the AWS CLI does); then the push after a 1% change, and a push of
  what is already there.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

import merkle
from bench.common import (
    fmt_bytes,
    fmt_duration,
    markdown_table,
    moto_endpoint,
    new_bucket,
    temp_dir,
)
from merkle.storage import open_store
from tests.versions.counting import CountingStore


def _rows(start: int, stop: int, tag: str = "") -> pa.Table:
    ids = pa.array(range(start, stop), type=pa.int64())
    return pa.table(
        {
            "id": ids,
            "amount": pa.array([i * 0.5 for i in range(start, stop)]),
            "sku": pa.array([f"{tag}sku-{i % 9973}" for i in range(start, stop)]),
        }
    )


def _load(uri: str, rows: int) -> merkle.Database:
    with merkle.connect(uri) as conn:
        db = conn.create_db("big").create_table("t", key="id")
        step = 1_000_000
        for start in range(0, rows, step):
            db = db.write("t", _rows(start, min(rows, start + step)))
        return db.compact().commit()


def _timed(fn: object) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()  # type: ignore[operator]
    return time.perf_counter() - start, result


def _cold(uri: str, fn: object, runs: int) -> tuple[float, int, int]:
    """Median seconds, blocks read and bytes read of ``fn(conn)`` on fresh connections."""
    times, blocks, nbytes = [], 0, 0
    for _ in range(runs):
        store = CountingStore(open_store(uri))
        with merkle.Connection(store) as conn:
            seconds, _ = _timed(lambda conn=conn: fn(conn))  # type: ignore[operator]
            times.append(seconds)
            blocks, nbytes = store.block_reads, store.read_bytes
    return sorted(times)[len(times) // 2], blocks, nbytes


def _diff_section(quick: bool) -> str:
    rows = 200_000 if quick else 10_000_000
    runs = 3
    out = []
    with temp_dir("merkle-bench-versions-") as scratch:
        uri = (scratch / "lake").as_uri()
        base = _load(uri, rows)
        with merkle.connect(uri) as conn:
            db = conn.open_db("big")
            start = rows // 3
            clustered = db.write("t", _rows(start, start + 100, "x")).compact().commit()
            keys = random.Random(5).sample(range(rows), 100)
            pending = clustered.write("t", [{"id": k, "amount": -1.0} for k in keys]).commit()
        cases = [
            ("100 neighbouring records (in tablets)", base.version, clustered.version),
            ("100 records anywhere (pending batch)", clustered.version, pending.version),
        ]
        for label, old, new in cases:

            def diff(conn: merkle.Connection, old: int = old, new: int = new) -> None:
                changes = conn.open_db("big", version=new).diff(old)["t"].records()
                assert len(changes) == 100, len(changes)

            def full(conn: merkle.Connection, old: int = old, new: int = new) -> None:
                conn.open_db("big", version=old).to_arrow("t")
                conn.open_db("big", version=new).to_arrow("t")

            d_time, d_blocks, d_bytes = _cold(uri, diff, runs)
            f_time, f_blocks, f_bytes = _cold(uri, full, 1 if not quick else runs)
            out.append(
                [
                    label,
                    fmt_duration(d_time),
                    f"{d_blocks:,} / {fmt_bytes(d_bytes)}",
                    fmt_duration(f_time),
                    f"{f_blocks:,} / {fmt_bytes(f_bytes)}",
                    f"{f_time / d_time:,.0f}x",
                ]
            )
    table = markdown_table(
        [
            f"diff of two versions of {rows:,} rows",
            "diff (cold)",
            "diff reads (blocks / bytes)",
            "read both in full (cold)",
            "full reads",
            "speed-up",
        ],
        out,
    )
    return (
        f"Table of {rows:,} rows (int64 key, float, string; 100,000-row tablets), file lake, "
        "median of 3 cold runs (new connection each: no decoded block cached; OS page "
        "cache warm; the second full read reuses the decoded blocks the two versions "
        "share). The pending case reads the batch and, in the tablets, only the pages "
        "that hold the old records of the 100 keys (the old values are part of the "
        "answer).\n\n" + table
    )


def _aws_sync_copy(lake: Path, endpoint: str) -> tuple[float, int, int]:
    """Upload every block file the way ``aws s3 sync`` does: 10 threads, one PUT each."""
    import boto3

    bucket = new_bucket(endpoint)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    files = [p for p in (lake / "blocks").iterdir() if p.is_file() and not p.name.startswith(".")]

    def upload(path: Path) -> None:
        client.upload_file(str(path), bucket, f"copy/blocks/{path.name}")

    start = time.perf_counter()
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(upload, files))
    return time.perf_counter() - start, len(files), sum(p.stat().st_size for p in files)


def _push_section(quick: bool) -> str:
    rows = 100_000 if quick else 1_000_000
    out = []
    with temp_dir("merkle-bench-push-") as scratch, moto_endpoint() as endpoint:
        lake = scratch / "lake"
        _load(lake.as_uri(), rows)
        s3_uri = f"s3://{new_bucket(endpoint)}/lake"
        options: dict[str, Any] = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        with merkle.connect(lake) as src, merkle.connect(s3_uri, **options) as dst:
            seconds, report = _timed(lambda: merkle.sync(src, dst, "big"))
            c = report.copy  # type: ignore[attr-defined]
            out.append(
                [
                    "merkle push (first)",
                    fmt_duration(seconds),
                    f"{c.blocks_copied:,}",
                    fmt_bytes(c.bytes_copied),
                ]
            )
            first_bytes = c.bytes_copied
            db = src.open_db("big")
            keys = random.Random(3).sample(range(rows), rows // 100)
            db.write("t", [{"id": k, "amount": -1.0, "sku": "changed"} for k in keys]).commit()
            seconds, report = _timed(lambda: merkle.sync(src, dst, "big"))
            c = report.copy  # type: ignore[attr-defined]
            share = c.bytes_copied / first_bytes if first_bytes else 0.0
            out.append(
                [
                    "merkle push after a 1% change",
                    fmt_duration(seconds),
                    f"{c.blocks_copied:,}",
                    f"{fmt_bytes(c.bytes_copied)} ({share:.1%} of the first)",
                ]
            )
            seconds, report = _timed(lambda: merkle.sync(src, dst, "big"))
            c = report.copy  # type: ignore[attr-defined]
            out.append(
                [
                    "merkle push, nothing new",
                    fmt_duration(seconds),
                    f"{c.blocks_copied:,}",
                    fmt_bytes(c.bytes_copied),
                ]
            )
        seconds, files, nbytes = _aws_sync_copy(lake, endpoint)
        out.append(
            [
                "boto3, `aws s3 sync` style (all blocks)",
                fmt_duration(seconds),
                f"{files:,}",
                fmt_bytes(nbytes),
            ]
        )
    table = markdown_table(
        ["push of " + f"{rows:,} rows, file lake -> moto S3", "time", "blocks", "bytes"], out
    )
    return (
        "Source: a file lake; destination: a moto S3 server on 127.0.0.1 (Python, shares "
        "the 2 cores). The boto3 row copies every block file of the source lake (all "
        "versions' blocks) with 10 threads. The 1% change is a commit of 1% of the rows "
        "at random keys (a pending batch).\n\n" + table
    )


def run(quick: bool) -> str:
    return _diff_section(quick) + "\n\n" + _push_section(quick)
