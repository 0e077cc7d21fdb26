"""Input files of ``merkle load``: what they hold, how they are read, and where they go wrong.

Before any reader starts, the first bytes of a file are checked against its
format (a Parquet file named ``.csv`` is one clear error, never a CSV parse
of binary bytes). CSV options: the delimiter, the null values (applied to
every column but the key: a key ``null`` stays the string ``null``), and
column types. A value that does not convert is reported with the file, the
row number and the column, found by re-reading the file as text.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from merkle.cli.common import CliError

__all__ = [
    "INPUT_FORMATS",
    "ReadOptions",
    "Source",
    "check_content",
    "detect_format",
    "parse_type",
    "parse_types",
    "peek_types",
    "read_batches",
]

#: Input formats, and the file extensions that select them.
INPUT_FORMATS = {
    "csv": (".csv", ".tsv"),
    "jsonl": (".jsonl", ".ndjson"),
    "parquet": (".parquet", ".pq"),
}
#: Compressed files, by extension: the Arrow codec that reads them.
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}
#: Bytes per block of the CSV and JSON readers (one record batch each).
BLOCK_SIZE = 4 << 20
_MAGIC = {
    b"PAR1": "Parquet",
    b"\x1f\x8b": "gzip-compressed",
    b"(\xb5/\xfd": "zstd-compressed",
    b"BZh": "bzip2-compressed",
    b"ARROW1": "Arrow IPC",
    b"PK\x03\x04": "a zip archive",
}


def split_compression(path: str) -> tuple[str, str | None]:
    """``path`` without a compression extension, and the Arrow codec of that extension."""
    root, ext = os.path.splitext(path)
    codec = _COMPRESSION.get(ext.lower())
    return (root, codec) if codec else (path, None)


def detect_format(path: str, given: str | None) -> str:
    """The input format of ``path``: ``given``, else from its extension (CliError if unknown)."""
    if given is not None:
        return given
    if path == "-":
        raise CliError("reading stdin needs --format csv or --format jsonl")
    name, _ = split_compression(path)
    ext = os.path.splitext(name)[1].lower()
    for fmt, extensions in INPUT_FORMATS.items():
        if ext in extensions:
            return fmt
    known = ", ".join(e for exts in INPUT_FORMATS.values() for e in exts)
    raise CliError(
        f"cannot tell the format of {path} from its extension ({known}): "
        "pass --format csv, jsonl or parquet"
    )


def check_content(path: str, fmt: str) -> None:
    """CliError when the first bytes of ``path`` show it is not ``fmt`` (stdin is not checked)."""
    if path == "-":
        return
    codec = split_compression(path)[1]
    with open(path, "rb") as raw:
        head = raw.read(4096)
    if codec is not None:
        stream = pa.CompressedInputStream(pa.py_buffer(head), codec)
        try:
            head = stream.read(4096)
        except (pa.ArrowException, OSError):
            raise CliError(f"{path} is not {codec}-compressed, as its name says") from None
    seen = next((what for magic, what in _MAGIC.items() if head.startswith(magic)), None)
    if fmt == "parquet":
        if not head.startswith(b"PAR1"):
            raise CliError(
                f"cannot read {path} as parquet: it is not a Parquet file (no PAR1 at its start)"
                + (f": it looks like {seen}" if seen else "")
                + "; pass the right --format"
            )
        return
    if seen is not None:
        hint = "--format parquet" if seen == "Parquet" else "the right file or extension"
        raise CliError(f"cannot read {path} as {fmt}: it looks like {seen}; pass {hint}")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4 or b"\x00" in head:
            raise CliError(
                f"{path} is not {fmt} text: byte {exc.start} is not UTF-8; pass the right --format"
            ) from None
    if b"\x00" in head:
        raise CliError(f"{path} is not {fmt} text: it holds NUL bytes; pass the right --format")
    if fmt == "jsonl":
        text = head.lstrip()
        if text and not text.startswith(b"{"):
            raise CliError(f"{path} is not JSON Lines: each line must be a JSON object")


# -- types given on the command line -------------------------------------------------


def parse_type(text: str) -> pa.DataType:
    """An Arrow type from its name: ``int32``, ``string``, ``decimal128(10,2)``,
    ``timestamp[us, tz=Europe/Berlin]``, ``date32``, ..."""
    text = text.strip()
    try:
        return pa.type_for_alias(text)
    except ValueError:
        pass
    lowered = text.replace(" ", "")
    if lowered.startswith("decimal128(") and lowered.endswith(")"):
        precision, _, scale = lowered[len("decimal128(") : -1].partition(",")
        try:
            return pa.decimal128(int(precision), int(scale or 0))
        except ValueError:
            pass
    if lowered.startswith("timestamp[") and lowered.endswith("]"):
        unit, _, zone = lowered[len("timestamp[") : -1].partition(",")
        try:
            return pa.timestamp(unit, tz=zone.removeprefix("tz=") or None)
        except (ValueError, pa.ArrowException):
            pass
    raise CliError(
        f"unknown type {text!r}: use an Arrow type name such as int32, int64, float64, "
        "string, bool, date32, decimal128(10,2), timestamp[us] or timestamp[us, tz=UTC]"
    )


def parse_types(text: str | None) -> dict[str, pa.DataType]:
    """``name:type,name:type`` as ``{name: type}`` (a decimal's comma is kept)."""
    if not text:
        return {}
    out: dict[str, pa.DataType] = {}
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(text):
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in parts:
        name, sep, kind = part.partition(":")
        if not sep or not name.strip():
            raise CliError(f"{part!r} is not NAME:TYPE (for example amount:decimal128(10,2))")
        out[name.strip()] = parse_type(kind)
    return out


# -- reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """How ``merkle load`` reads its files."""

    key_fields: tuple[str, ...]
    key_types: Mapping[str, pa.DataType] = field(default_factory=dict)
    column_types: Mapping[str, pa.DataType] = field(default_factory=dict)
    delimiter: str | None = None  # None: tab for .tsv files, else a comma
    null_values: tuple[str, ...] = ("",)


class _CountingReader:
    """A binary file that counts the bytes read from it (for the progress bar)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.count = 0
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.count += len(data)
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


@dataclass
class Source:
    """One input file being read: its record batches and how many bytes were consumed."""

    path: str
    fmt: str
    size: int
    counter: _CountingReader | None = None
    parquet: pq.ParquetFile | None = None

    def consumed(self, rows_read: int) -> int:
        if self.parquet is not None:
            total = self.parquet.metadata.num_rows
            return self.size * rows_read // total if total else self.size
        return self.counter.count if self.counter is not None else 0


def _open_text(path: str) -> tuple[Any, _CountingReader]:
    raw: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    counter = _CountingReader(raw)
    stream: Any = pa.PythonFile(counter, mode="r")
    codec = split_compression(path)[1] if path != "-" else None
    if codec is not None:
        stream = pa.CompressedInputStream(stream, codec)
    return stream, counter


def _csv_reader(
    stream: Any, options: ReadOptions, types: Mapping[str, pa.DataType], path: str
) -> Any:
    convert = pacsv.ConvertOptions(
        column_types=dict(types) or None,
        null_values=list(options.null_values),
        # Strings are never null by the reader: null values are applied below, key excepted.
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    return pacsv.open_csv(
        stream,
        read_options=pacsv.ReadOptions(block_size=BLOCK_SIZE),
        parse_options=pacsv.ParseOptions(delimiter=_delimiter(options, path)),
        convert_options=convert,
    )


def _delimiter(options: ReadOptions, path: str) -> str:
    if options.delimiter is not None:
        return options.delimiter
    return "\t" if split_compression(path)[0].lower().endswith(".tsv") else ","


def _nulls_in_strings(batch: pa.RecordBatch, options: ReadOptions) -> pa.RecordBatch:
    """Null values applied to the string columns the reader left alone (never the key)."""
    nulls = pa.array(list(options.null_values), pa.string())
    arrays = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_string(column.type) and name not in options.key_fields:
            column = pc.if_else(pc.is_in(column, value_set=nulls), None, column)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


def read_batches(source: Source, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The record batches of one file (the caller checked its content first)."""
    types = {**options.column_types, **options.key_types}
    if source.fmt == "parquet":
        if source.path == "-":
            raise CliError("parquet cannot be read from stdin: name the file")
        source.parquet = pq.ParquetFile(source.path)
        try:
            for batch in source.parquet.iter_batches(batch_size=65536):
                yield _cast(batch, types) if types else batch
        finally:
            source.parquet.close()
        return
    stream, source.counter = _open_text(source.path)
    reader: Any = None
    try:
        if source.fmt == "csv":
            reader = _csv_reader(stream, options, types, source.path)
            for batch in reader:
                yield _nulls_in_strings(batch, options)
        else:
            parse = pajson.ParseOptions(
                explicit_schema=pa.schema(list(types.items())) if types else None,
                unexpected_field_behavior="infer",
            )
            reader = pajson.open_json(
                stream, read_options=pajson.ReadOptions(block_size=BLOCK_SIZE), parse_options=parse
            )
            yield from reader
    finally:
        if reader is not None:
            reader.close()
        if source.path != "-":
            source.counter.raw.close()


def peek_types(
    source: Source, options: ReadOptions, names: Sequence[str]
) -> dict[str, pa.DataType]:
    """The types the CSV reader gives ``names`` in the first block, with no null values.

    A key column is read with these (null values never apply to the key), so
    a key ``null`` in a new table is the string it is.
    """
    if source.fmt != "csv" or source.path == "-":
        return {}
    plain = ReadOptions(options.key_fields, {}, options.column_types, options.delimiter, ("",))
    stream, counter = _open_text(source.path)
    try:
        reader = _csv_reader(stream, plain, dict(options.column_types), source.path)
        try:
            schema = reader.schema
        finally:
            reader.close()
    except pa.ArrowException:
        return {}
    finally:
        counter.raw.close()
    return {name: schema.field(name).type for name in names if name in schema.names}


def _cast(batch: pa.RecordBatch, types: Mapping[str, pa.DataType]) -> pa.RecordBatch:
    fields = [
        batch.schema.field(name).with_type(types[name])
        if name in types
        else batch.schema.field(name)
        for name in batch.schema.names
    ]
    return batch.cast(pa.schema(fields))


def locate_csv_error(
    source: Source, options: ReadOptions, expected: Mapping[str, pa.DataType]
) -> str | None:
    """Where a CSV value fails to convert: ``row N, column C: value V is not T`` (or None).

    The file is read again with every column as text and each column cast
    to the type the reader chose for it; the first value that fails is named.
    """
    if source.fmt != "csv" or source.path == "-":
        return None
    as_text = ReadOptions(
        options.key_fields, {}, {n: pa.string() for n in expected}, options.delimiter, ()
    )
    stream, counter = _open_text(source.path)
    row = 0
    try:
        reader = _csv_reader(stream, as_text, as_text.column_types, source.path)
        try:
            for batch in reader:
                for name, target in expected.items():
                    if name not in batch.schema.names:
                        continue
                    column = batch.column(name)
                    nulls = pa.array(list(options.null_values), pa.string())
                    column = pc.if_else(pc.is_in(column, value_set=nulls), None, column)
                    for i, value in enumerate(column.to_pylist()):
                        if value is None:
                            continue
                        try:
                            pa.array([value]).cast(target)
                        except (pa.ArrowException, ValueError):
                            return (
                                f"row {row + i + 1} (line {row + i + 2}), column {name!r}: "
                                f"{value!r} is not {target}"
                            )
                row += batch.num_rows
        finally:
            reader.close()
    except pa.ArrowException:
        return None
    finally:
        counter.raw.close()
    return None


def key_values(batch: pa.RecordBatch, key_fields: Sequence[str]) -> list[Any]:
    """The key of every row of a batch (tuples for a composite key)."""
    columns = [batch.column(name).to_pylist() for name in key_fields]
    return columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
