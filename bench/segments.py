"""Segment encoding: Arrow IPC compression (none, lz4, zstd) on realistic tablets.

Measures, for each compression, the encoded size of a segment, the time to
encode it (``encode_segment``) and to decode it (``decode_segment``), on two
tablets of the default tablet size: a typed one (int64 key, short string,
float, low-cardinality string, timestamp) and a CBOR-heavy one (mixed-type and
nested fields). Also times the Python paths around them (records to Arrow and
back) so the cost of a segment is seen next to the cost of its records, and
the key codecs one key at a time (point reads) and a column at a time
(``encode_array``, bulk paths). The numbers are reported, never asserted;
they chose ``SEGMENT_CODEC`` (doc/format.md, "Segments").

Run: ``python -m bench segments [--quick]``.
"""

from __future__ import annotations

import datetime
import functools
import random
from typing import Any

import pyarrow as pa

from bench.common import fmt_duration, markdown_table, repeat
from merkle.tablets.keys import KeyCodec, key_codec
from merkle.tablets.segment import (
    SEGMENT_CODEC,
    arrow_to_records,
    decode_segment,
    encode_segment,
    records_to_arrow,
)

__all__ = ["run"]

KEY = "id"
CODEC = key_codec("int")
COMPRESSIONS: list[tuple[str, Any]] = [
    ("none", None),
    ("lz4", "lz4"),
    ("zstd level 1 (Arrow's default)", pa.Codec("zstd", compression_level=1)),
    ("zstd level 3", pa.Codec("zstd", compression_level=3)),
    ("zstd level 9", pa.Codec("zstd", compression_level=9)),
]
STATUSES = ["new", "paid", "shipped", "delivered", "returned"]
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def typed_records(rows: int, rng: random.Random) -> list[dict[str, Any]]:
    """Orders: increasing keys with gaps, customer names, prices, a status, event times."""
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    key = 1_000_000
    records = []
    for i in range(rows):
        key += rng.randint(1, 5)
        created = start + datetime.timedelta(seconds=i * 3, microseconds=rng.randint(0, 999_999))
        records.append(
            {
                KEY: key,
                "customer": f"user-{rng.randint(0, 50_000):05d}",
                "price": round(rng.lognormvariate(3, 1), 2),
                "status": rng.choice(STATUSES),
                "created": created,
            }
        )
    return records


def cbor_records(rows: int, rng: random.Random) -> list[dict[str, Any]]:
    """Schema-free documents: mixed-type and nested fields, stored as CBOR columns."""
    records = []
    for i in range(rows):
        value: Any = rng.choice([rng.randint(0, 1000), rng.random(), rng.choice(WORDS), None])
        tags: list[Any] = [rng.choice(WORDS) for _ in range(rng.randint(0, 4))]
        records.append(
            {
                KEY: i,
                "value": value,
                "attrs": {
                    "w": rng.choice(WORDS),
                    "n": rng.randint(0, 100),
                    "ok": rng.random() < 0.5,
                },
                "tags": [*tags, rng.randint(0, 9)],
                "note": rng.choice(WORDS) if rng.random() < 0.7 else None,
            }
        )
    return records


def is_chosen(compression: Any) -> bool:
    return (
        isinstance(compression, pa.Codec)
        and compression.name == SEGMENT_CODEC.name
        and compression.compression_level == SEGMENT_CODEC.compression_level
    )


def measure(name: str, records: list[dict[str, Any]], times: int) -> str:
    """One dataset: its shape, the record conversions, then a row per compression."""
    to_arrow = repeat(lambda: records_to_arrow(records, key_field=KEY, codec=CODEC), times=1)
    table = records_to_arrow(records, key_field=KEY, codec=CODEC)
    to_records = repeat(lambda: arrow_to_records(table, key_field=KEY, codec=CODEC), times=1)
    columns = ", ".join(f"{field.name}: {field.type}" for field in table.schema)
    header = (
        f"**{name}**: {table.num_rows:,} rows ({columns}), {table.nbytes / 1e6:.2f} MB in "
        f"memory. Records to Arrow {fmt_duration(to_arrow.median)}, "
        f"Arrow to records {fmt_duration(to_records.median)}."
    )
    rows = []
    uncompressed = 0
    for label, compression in COMPRESSIONS:
        data = encode_segment(table, compression=compression)
        if not decode_segment(data).equals(table):
            raise RuntimeError(f"{label}: the segment does not decode to its table")
        uncompressed = uncompressed or len(data)
        encode = repeat(
            functools.partial(encode_segment, table, compression=compression), times=times
        )
        decode = repeat(functools.partial(decode_segment, data), times=times)
        rows.append(
            [
                label + (" **(chosen)**" if is_chosen(compression) else ""),
                f"{len(data) / 1e3:,.0f}",
                f"{uncompressed / len(data):.2f}",
                fmt_duration(encode.median),
                fmt_duration(decode.median),
            ]
        )
    table_md = markdown_table(["compression", "size (kB)", "ratio", "encode", "decode"], rows)
    return f"{header}\n\n{table_md}"


KEY_SAMPLES: list[tuple[str, Any]] = [
    ("int", lambda i: i * 7919 - 10**9),
    ("float", lambda i: i / 7.0 - 1e4),
    ("str", lambda i: f"user-{i:08d}"),
    ("timestamp", lambda i: datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=i)),
    ("reverse(str)", lambda i: f"user-{i:08d}"),
    ("tuple(int,str)", lambda i: (i % 100, f"item-{i}")),
    ("tuple(str,reverse(timestamp))", lambda i: (f"s{i % 10}", datetime.datetime(2024, 1, 1))),
]


def encode_each(codec: KeyCodec, values: list[Any]) -> list[bytes]:
    return [codec.encode(value) for value in values]


def measure_keys(rows: int, times: int) -> str:
    """Key codecs: one key at a time (the point-read path) and whole columns (bulk paths)."""
    lines = []
    for spec, make in KEY_SAMPLES:
        codec = key_codec(spec)
        values = [make(i) for i in range(rows)]
        column = codec.to_arrow(values)
        sample = values[: min(rows, 10_000)]
        one = repeat(functools.partial(encode_each, codec, sample), times=times)
        bulk = repeat(functools.partial(codec.encode_array, column), times=times)
        lines.append(
            [
                f"`{spec}`",
                fmt_duration(one.median / len(sample)),
                fmt_duration(bulk.median),
                fmt_duration(bulk.median / rows),
            ]
        )
    headers = ["codec", "encode (one key)", f"encode_array ({rows:,} keys)", "per key"]
    return "**Key codecs**\n\n" + markdown_table(headers, lines)


def run(quick: bool) -> str:
    """The Markdown report: one table of numbers per dataset."""
    rows = 20_000 if quick else 100_000
    times = 3 if quick else 9
    rng = random.Random(4)
    intro = (
        f"Segment blocks of {rows:,}-row tablets, one record batch each; median of {times} "
        f"runs (pyarrow {pa.__version__}). Ratio: uncompressed size / size. Decode without "
        "compression is zero-copy."
    )
    typed = measure("Typed tablet", typed_records(rows, rng), times)
    mixed = measure("CBOR-heavy tablet", cbor_records(rows, rng), times)
    keys = measure_keys(rows, times)
    return f"{intro}\n\n{typed}\n\n{mixed}\n\n{keys}"
