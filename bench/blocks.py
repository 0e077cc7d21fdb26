"""Block put and get throughput beside hashing and plain Python file I/O of the same bytes.

For 1 KiB, 64 KiB and 4 MiB blocks: ``BlockStore.put`` of new blocks, put of
blocks already stored (a metadata check, no upload), and ``get`` (read and
verify the hash), on the memory and the file store; next to BLAKE3 hashing of
the same bytes and to writing and reading the same bytes with plain Python,
both durably (temp file, fsync, rename, fsync the directory: what the file
store promises) and plainly (open, write). The ratio of the file store's put
to the durable plain write is the cost of content addressing on a disk; the
aim is at most 1.5x on large blocks.

Also the cost of the DAG-CBOR codec on a full index node (256 children).

Run: ``python -m bench blocks [--quick]``.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import cbor2

from bench.common import (
    Timing,
    fmt_bytes,
    fmt_duration,
    fmt_rate,
    markdown_table,
    repeat,
    temp_dir,
    time_each,
    time_interleaved,
)
from merkle.blocks import CID, BlockStore, decode_node, encode_node
from merkle.storage.file import FileStore
from merkle.storage.memory import MemoryStore

__all__ = ["run"]

KiB = 1024
MiB = 1024 * KiB

#: (block size, blocks in a full run, blocks in a quick run)
SIZES: tuple[tuple[int, int, int], ...] = ((KiB, 2000, 200), (64 * KiB, 400, 40), (4 * MiB, 24, 4))


@dataclass(frozen=True)
class Result:
    """One operation over all blocks of one size."""

    nbytes: int
    timing: Timing
    per_op: bool = True  # False: one sample for a whole batch, no latency percentiles


def make_blocks(size: int, count: int, seed: int) -> list[bytes]:
    """``count`` distinct blocks of ``size`` pseudo-random bytes (incompressible, no dedup)."""
    base = random.Random(seed).randbytes(size)
    return [struct.pack(">Q", i)[: min(8, size)] + base[8:] for i in range(count)]


def durable_write(path: str, data: bytes) -> None:
    """Plain Python with the file store's durability: temp file, fsync, rename, fsync dir."""
    directory = os.path.dirname(path)
    temp = os.path.join(directory, "." + os.path.basename(path) + ".tmp")
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def plain_write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def plain_read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


FILE_PUT = "file: put new, one at a time"
FILE_GET = "file: get + verify"
DURABLE_WRITE = "plain Python: write, fsync, rename, fsync dir"
PLAIN_WRITE = "plain Python: open, write (no fsync)"
PLAIN_READ = "plain Python: open, read"


def measure_size(blocks: list[bytes], scratch: Path) -> dict[str, Result]:
    """Every operation on one block size; the keys are the row labels, in table order.

    Operations that are compared with each other (the file store's put with
    plain writes, its get with plain reads) take turns block by block, so
    they run under the same background load.
    """
    total = sum(len(b) for b in blocks)
    results: dict[str, Result] = {}

    def record(label: str, fn: Callable[[Any], Any], items: Sequence[Any]) -> None:
        results[label] = Result(total, time_each(fn, items))

    record("BLAKE3 hash, 1 thread", lambda b: blake3.blake3(b).digest(), blocks)
    record("CID.of (BLAKE3, threads above 1 MiB)", lambda b: CID.of(b, "raw"), blocks)

    memory = BlockStore(MemoryStore())
    record("memory: put new", memory.put, blocks)
    cids = [memory.cid_of(b, "raw") for b in blocks]
    record("memory: put existing", memory.put, blocks)
    record("memory: get + verify", memory.get, cids)

    files = BlockStore(FileStore(str(scratch / "lake")))
    for name in ("durable", "plain"):
        (scratch / name).mkdir()
    numbered = list(enumerate(blocks))
    os.sync()  # start the writes without dirty pages left by earlier work
    writes = time_interleaved(
        {
            FILE_PUT: lambda item: files.put(item[1]),
            DURABLE_WRITE: lambda item: durable_write(
                str(scratch / "durable" / f"{item[0]:08d}"), item[1]
            ),
        },
        numbered,
    )
    # Alone: between fsyncs it would wait for their journal commits.
    os.sync()
    writes[PLAIN_WRITE] = time_each(
        lambda item: plain_write(str(scratch / "plain" / f"{item[0]:08d}"), item[1]), numbered
    )
    record("file: put existing", files.put, blocks)
    reads = time_interleaved(
        {
            FILE_GET: lambda item: files.get(cids[item[0]]),
            PLAIN_READ: lambda item: plain_read(str(scratch / "durable" / f"{item[0]:08d}")),
        },
        numbered,
    )

    batched = BlockStore(FileStore(str(scratch / "lake-batch")))
    pairs = [(b, "raw") for b in blocks]
    os.sync()
    batch = repeat(lambda: batched.put_many(pairs), times=1, warmup=0)

    for label, timing in [*writes.items(), *reads.items()]:
        results[label] = Result(total, timing)
    results["file: put_many new, one batch"] = Result(total, batch, per_op=False)
    order = [
        *list(results)[:5],
        FILE_PUT,
        "file: put_many new, one batch",
        "file: put existing",
        FILE_GET,
        DURABLE_WRITE,
        PLAIN_WRITE,
        PLAIN_READ,
    ]
    return {label: results[label] for label in order}


def throughput_table(sizes: list[int], measured: list[dict[str, Result]]) -> str:
    labels = list(measured[0])
    rows = [
        [label, *(fmt_rate(m[label].nbytes, m[label].timing.total) for m in measured)]
        for label in labels
    ]
    return markdown_table(["operation", *(fmt_bytes(s) for s in sizes)], rows)


def latency_table(sizes: list[int], measured: list[dict[str, Result]]) -> str:
    labels = [label for label, result in measured[0].items() if result.per_op]
    rows = [
        [
            label,
            *(
                f"{fmt_duration(m[label].timing.p50)} / {fmt_duration(m[label].timing.p99)}"
                for m in measured
            ),
        ]
        for label in labels
    ]
    return markdown_table(["operation (p50 / p99)", *(fmt_bytes(s) for s in sizes)], rows)


def ratio(m: dict[str, Result], label: str, baseline: str) -> float:
    return m[label].timing.total / m[baseline].timing.total


def index_node() -> dict[str, Any]:
    """A full index node: 256 children with 16-byte separator keys, counts and sizes."""
    rng = random.Random(1)
    children = [CID.of(rng.randbytes(64), "dag-cbor") for _ in range(256)]
    keys = sorted(rng.randbytes(16) for _ in range(255))
    return {
        "type": "merkle/index",
        "v": 1,
        "height": 1,
        "keys": keys,
        "children": children,
        "counts": [rng.randint(1_000, 60_000) for _ in children],
        "sizes": [rng.randint(1 << 20, 64 << 20) for _ in children],
        "first_key": keys[0],
        "last_key": keys[-1],
    }


def cbor2_reference(node: Any) -> bytes:
    """cbor2 in canonical mode with 64-bit floats and tag-42 links (the encoder we replaced)."""

    def encode_float(encoder: cbor2.CBOREncoder, value: float) -> None:
        encoder.write(struct.pack(">Bd", 0xFB, value))

    def encode_link(encoder: cbor2.CBOREncoder, cid: CID) -> None:
        encoder.encode_semantic(42, b"\x00" + cid.bytes)

    return cbor2.dumps(node, canonical=True, encoders={float: encode_float}, default=encode_link)


def codec_section(quick: bool) -> str:
    node = index_node()
    data = encode_node(node)
    if cbor2_reference(node) != data or decode_node(data) != node:
        raise RuntimeError("encode_node disagrees with the cbor2 reference: run tests/blocks")
    times = 200 if quick else 2000
    rows = []
    for label, fn in (
        ("encode_node", lambda: encode_node(node)),
        ("cbor2 canonical + overrides (reference)", lambda: cbor2_reference(node)),
        ("decode_node", lambda: decode_node(data)),
        ("decode_node(strict=True)", lambda: decode_node(data, strict=True)),
        ("CID.of (BLAKE3)", lambda: CID.of(data)),
    ):
        timing = repeat(fn, times=times, warmup=10)
        rows.append([label, fmt_duration(timing.median), fmt_duration(timing.p99)])
    return (
        f"DAG-CBOR codec on a full index node (256 children, 16-byte keys, counts, sizes; "
        f"{len(data):,} bytes), {times} runs:\n\n"
        + markdown_table(["operation", "median", "p99"], rows)
    )


def run(quick: bool) -> str:
    """Measure every size on a scratch directory and return the Markdown section."""
    sizes = [size for size, _, _ in SIZES]
    measured = []
    counts = []
    with temp_dir("merkle-bench-blocks-") as scratch:
        for index, (size, full, small) in enumerate(SIZES):
            count = small if quick else full
            counts.append(count)
            where = scratch / f"size-{size}"
            where.mkdir()
            measured.append(measure_size(make_blocks(size, count, index), where))
    put_ratios = [ratio(m, FILE_PUT, DURABLE_WRITE) for m in measured]
    read_ratios = [ratio(m, FILE_GET, PLAIN_READ) for m in measured]
    large = put_ratios[-1]
    verdict = (
        "within the 1.5x aim" if large <= 1.5 else "**above the 1.5x aim** (see the notes below)"
    )
    blocks_line = ", ".join(
        f"{count} x {fmt_bytes(size)}" for size, count in zip(sizes, counts, strict=True)
    )
    return "\n".join(
        [
            f"Blocks written and read per size: {blocks_line}; new blocks are distinct, "
            "incompressible bytes. File stores and plain files live on the same scratch "
            "directory; the file store's put and the durable plain write take turns block by "
            "block (so do its get and the plain read), so they share the background load. Reads "
            "come from the page cache (just written). MB = 10^6 bytes.",
            "",
            "Throughput (total bytes / total time):",
            "",
            throughput_table(sizes, measured),
            "",
            "Latency per operation:",
            "",
            latency_table(sizes, measured),
            "",
            markdown_table(
                ["file store vs plain Python (time ratio)", *(fmt_bytes(s) for s in sizes)],
                [
                    ["put new / durable write", *(f"{r:.2f}x" for r in put_ratios)],
                    ["get + verify / plain read", *(f"{r:.2f}x" for r in read_ratios)],
                ],
            ),
            "",
            f"On {fmt_bytes(sizes[-1])} blocks the file store's put takes {large:.2f}x the time "
            f"of a plain Python write of the same durability: {verdict}.",
            "",
            codec_section(quick),
        ]
    )
