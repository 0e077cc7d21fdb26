"""Input files of ``merkle load``: what they hold, how they are read, and where they go wrong.

Before any reader starts, the first bytes of a file are checked against its
format (``merkle.cli.content``: a Parquet file named ``.csv`` is one clear
error, never a CSV parse of binary bytes). CSV options: the delimiter, the null values (applied to
every column but the key: a key ``null`` stays the string ``null``), and
column types. A value that does not convert is reported with the file, the
row number and the column, found by re-reading the file as text.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from merkle.cli.common import CliError
from merkle.cli.content import BOM, check_content, split_compression
from merkle.cli.parquetcast import cast_columns
from merkle.cli.typenames import parse_type, parse_types
from merkle.tablets.fits import text_kind

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
#: Bytes per block of the CSV and JSON readers (one record batch each).
BLOCK_SIZE = 4 << 20


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


# -- reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """How ``merkle load`` reads its files."""

    key_fields: tuple[str, ...]
    key_types: Mapping[str, pa.DataType] = field(default_factory=dict)
    column_types: Mapping[str, pa.DataType] = field(default_factory=dict)
    delimiter: str | None = None  # None: tab for .tsv files, else a comma
    null_values: tuple[str, ...] = ("",)
    #: Fields read as the text ``merkle scan`` writes and converted to these types
    #: (``merkle.cli.rendered``): hex bytes, durations, a CSV cell's JSON, ...
    rendered: Mapping[str, pa.DataType] = field(default_factory=dict)
    #: The table's schema-free fields, read from JSON Lines as the JSON values the lines
    #: hold (no type, inferred or given: a value of any kind, as ``merkle scan`` wrote it).
    free: tuple[str, ...] = ()

    def reader_types(self) -> dict[str, pa.DataType]:
        """The types the reader gives columns: a rendered field is read as text."""
        types = {**self.column_types, **self.key_types}
        return {**types, **dict.fromkeys(self.rendered, pa.string())}


class _StdinReader:
    """Stdin as the readers see it: counts the bytes read (for the progress bar) and
    keeps the first two blocks (stdin cannot be read twice; see :func:`head_bytes`)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.count = 0
        self.head = bytearray()
        self.eof = False
        self.closed = False
        #: Drop a UTF-8 byte order mark at the start (set for JSON Lines).
        self.skip_bom = False
        #: Bytes to read again before stdin's next ones (see :meth:`rewind`).
        self.replay = b""

    def rewind(self) -> None:
        """Start again from the first byte (all read so far must be kept in ``head``)."""
        self.replay = bytes(self.head)

    def read(self, size: int = -1) -> bytes:
        if self.replay:  # kept bytes read again: counted, kept and stripped once already
            data = self.replay if size < 0 else self.replay[:size]
            self.replay = self.replay[len(data) :]
            return data
        data = self.raw.read(size)
        self.count += len(data)
        self.eof = self.eof or not data
        if self.skip_bom and self.count == len(data):  # the first bytes read
            data = data.removeprefix(BOM)
        if len(self.head) < 2 * BLOCK_SIZE:
            self.head += data[: 2 * BLOCK_SIZE - len(self.head)]
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class Input:
    """One opened text input: the stream the readers read, and how far they got.

    A file is opened as an Arrow native file, never through a Python file
    object: a reader's I/O thread then holds no Python object, so a read that
    fails (a truncated .gz) cannot leave that thread to release one while the
    interpreter exits, which aborted the process ("terminate called without an
    active exception"). Stdin has no native file; it is read through Python.
    """

    def __init__(self, path: str) -> None:
        self.stdin: _StdinReader | None = None
        self.file: pa.NativeFile | None = None
        self.done = 0
        if path == "-":
            self.stdin = _StdinReader(sys.stdin.buffer)
            self.stream: Any = pa.PythonFile(self.stdin, mode="r")
        else:
            self._open(path)

    def _open(self, path: str) -> None:
        self.file = pa.OSFile(path)
        codec = split_compression(path)[1]
        self.stream = pa.CompressedInputStream(self.file, codec) if codec else self.file

    def rewind(self, path: str) -> None:
        """Start reading again from the beginning (stdin: what its first two blocks keep,
        when no reader has read its stream yet)."""
        if self.stdin is None:
            self.close()
            self._open(path)
        else:
            self.stdin.rewind()

    def skip_bom(self, path: str) -> None:
        """Read past a UTF-8 byte order mark at the start of the content, if there is one:
        pyarrow's JSON reader takes it for a value (its CSV reader skips it itself)."""
        if self.stdin is not None:
            self.stdin.skip_bom = True
            return
        if self.stream.read(len(BOM)) != BOM:  # no mark: start again (a compressed
            self.close()  # stream cannot seek back)
            self._open(path)

    @property
    def count(self) -> int:
        """Bytes of the input read so far (compressed bytes for a compressed file)."""
        if self.stdin is not None:
            return self.stdin.count
        self._note_position()
        return self.done

    def _note_position(self) -> None:
        if self.file is not None and not self.file.closed:
            with contextlib.suppress(ValueError, OSError):
                self.done = self.file.tell()

    def close(self) -> None:
        """Close the file (stdin stays open), keeping its last position for the progress bar."""
        if self.file is not None:
            self._note_position()
            self.file.close()


@dataclass
class Source:
    """One input file being read: its record batches and how many bytes were consumed."""

    path: str
    fmt: str
    size: int
    counter: Input | None = None
    parquet: pq.ParquetFile | None = None
    #: The columns of the file as its reader sees them (set once it is open).
    schema: pa.Schema | None = None

    def consumed(self, rows_read: int) -> int:
        if self.parquet is not None:
            total = self.parquet.metadata.num_rows
            return self.size * rows_read // total if total else self.size
        return self.counter.count if self.counter is not None else 0

    @property
    def name(self) -> str:
        """The file's path, or ``stdin``: how messages name it."""
        return "stdin" if self.path == "-" else self.path

    @property
    def compressed(self) -> bool:
        """Whether the file is decompressed as it is read."""
        return self.path != "-" and split_compression(self.path)[1] is not None


def head_bytes(source: Source) -> bytes:
    """About the first two blocks of a text source's content (decompressed), cut after
    the last whole line unless they are all of it: what the first batch was read from."""
    if source.path == "-":
        kept = source.counter.stdin if source.counter is not None else None
        if kept is None:
            return b""
        data, whole = bytes(kept.head), kept.eof and len(kept.head) < 2 * BLOCK_SIZE
    else:
        opened = Input(source.path)
        out = bytearray()
        whole = False
        try:
            while len(out) < 2 * BLOCK_SIZE:
                chunk = opened.stream.read(BLOCK_SIZE)
                if not chunk:
                    whole = True
                    break
                out += chunk
        except (pa.ArrowException, OSError):
            pass  # the first batch was read; a later error is the main read's to report
        finally:
            opened.close()
        data = bytes(out)
    if not whole and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    return data


def csv_reader(
    stream: Any, options: ReadOptions, types: Mapping[str, pa.DataType], path: str
) -> Any:
    convert = pacsv.ConvertOptions(
        column_types=dict(types) or None,
        null_values=list(options.null_values),
        # With the default null value the reader nulls empty text cells and keeps a quoted
        # "" (how `merkle scan -f csv` writes an empty string); with others it nulls no
        # text: they are applied below, key excepted (see _nulls_in_strings).
        strings_can_be_null=_empty_cells_only(options),
        quoted_strings_can_be_null=False,
    )
    return pacsv.open_csv(
        stream,
        read_options=pacsv.ReadOptions(block_size=BLOCK_SIZE),
        parse_options=csv_parse_options(options, path),
        convert_options=convert,
    )


def csv_parse_options(options: ReadOptions, path: str) -> pacsv.ParseOptions:
    """How the CSV of ``path`` is split: the delimiter (default tab for .tsv, else a comma)."""
    if options.delimiter is not None:
        return pacsv.ParseOptions(delimiter=options.delimiter)
    tsv = split_compression(path)[0].lower().endswith(".tsv")
    return pacsv.ParseOptions(delimiter="\t" if tsv else ",")


def _is_text(kind: pa.DataType) -> bool:
    """Whether the CSV reader gives columns of ``kind`` as cell text it never makes null
    (a string or binary type of any width, ``merkle.tablets.fits.text_kind``)."""
    return text_kind(kind) is not None


def _nulls_in_strings(batch: pa.RecordBatch, options: ReadOptions) -> pa.RecordBatch:
    """Null values applied to the text columns the reader left alone (never the key).

    With ``strings_can_be_null=False`` the reader keeps every cell of a string,
    large_string, binary or large_binary column as it is (an empty cell is ``""``
    or ``b""``), so all four are nulled here: a binary column given by
    ``--column-types`` or by the table must not store ``b"NA"`` for ``NA``.
    """
    arrays = []
    empty_only = _empty_cells_only(options)
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if not _is_text(column.type):
            pass
        elif name in options.key_fields:
            if empty_only and column.null_count:  # an empty key cell is the empty key
                column = column.fill_null(pa.scalar("", pa.string()).cast(column.type))
        elif not empty_only:
            nulls = pa.array(list(options.null_values), pa.string()).cast(column.type)
            column = pc.if_else(pc.is_in(column, value_set=nulls), None, column)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


def _empty_cells_only(options: ReadOptions) -> bool:
    """Whether the only null value is the empty cell (the default): then the CSV reader
    nulls an empty text cell itself and keeps a quoted ``""`` as the empty string, which
    is how ``merkle scan -f csv`` writes one. Other null values (``NA``) must not apply
    to the key, and the reader cannot apply them to some columns only: they are applied
    after reading, to a quoted cell too."""
    return options.null_values == ("",)


def _converted(
    batch: pa.RecordBatch, options: ReadOptions, inferred: Mapping[str, pa.DataType]
) -> pa.RecordBatch:
    """``batch`` with its rendered columns (read as CSV text) converted to their types
    (``inferred``: those whose type the reader inferred, see :func:`_inferred_floats`)."""
    if not options.rendered:
        return batch
    from merkle.cli.rendered import BadValueError, typed_column

    arrays = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if name in options.rendered:
            try:
                column = typed_column(column, options.rendered[name], cells=True)
            except BadValueError as exc:
                if name in inferred and "beyond the range" not in exc.reason:
                    exc.reason += (  # a later value than the ones the type was inferred from
                        f"; column {name!r} is read as {inferred[name]}, the type inferred "
                        f"from the file's first {BLOCK_SIZE >> 20} MiB: pass --column-types "
                        f"{name}:string to read it whole as string"
                    )
                exc.field = name
                if exc.row is not None and set(options.key_fields) <= set(batch.schema.names):
                    exc.key = key_values(batch.slice(exc.row, 1), options.key_fields)[0]
                raise
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _stdin_schema(opened: Input, options: ReadOptions) -> pa.Schema | None:
    """The columns the CSV reader infers from the first block of stdin, which is read
    and left to be read again (None: it does not parse; the main read says why)."""
    if opened.stdin is None:
        return None
    first = b""
    while len(first) < BLOCK_SIZE and (data := opened.stdin.read(BLOCK_SIZE - len(first))):
        first += data
    opened.rewind("-")
    if len(first) == BLOCK_SIZE and b"\n" in first:
        first = first[: first.rindex(b"\n") + 1]  # the reader's first block ends a line
    try:
        reader = csv_reader(pa.BufferReader(first), options, options.reader_types(), "-")
        try:
            schema: pa.Schema = reader.schema
        finally:
            reader.close()
    except (pa.ArrowException, ValueError):
        return None
    return schema


def _inferred_floats(schema: pa.Schema | None, options: ReadOptions) -> dict[str, pa.DataType]:
    """The columns of a CSV file the reader inferred as floats (from the first block),
    to be read as text and converted (``merkle.cli.rendered``, one cast per column): the
    reader makes ``1e400`` Infinity without a word, as it does ``inf``; this refuses it."""
    if schema is None:
        return {}
    given = options.reader_types()
    return {f.name: f.type for f in schema if pa.types.is_floating(f.type) and f.name not in given}


def read_batches(source: Source, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The record batches of one file (the caller checked its content first)."""
    types = {**options.column_types, **options.key_types}
    if source.fmt == "parquet":
        if source.path == "-":
            raise CliError("parquet cannot be read from stdin: name the file")
        source.parquet = pq.ParquetFile(source.path)
        head = f"cannot read {source.name} as {source.fmt}: "
        done = 0
        try:
            for batch in source.parquet.iter_batches(batch_size=65536):
                yield cast_columns(batch, types, head, options.key_fields, done) if types else batch
                done += batch.num_rows
        finally:
            source.parquet.close()
        return
    source.counter = opened = Input(source.path)
    reader: Any = None
    try:
        if source.fmt == "jsonl":
            opened.skip_bom(source.path)
        stream = opened.stream
        if source.fmt == "csv":
            if opened.stdin is not None:  # the types of the first block, left to be read
                inferred = _inferred_floats(_stdin_schema(opened, options), options)
            else:
                reader = csv_reader(stream, options, options.reader_types(), source.path)
                inferred = _inferred_floats(reader.schema, options)
                if inferred:  # read again from the start
                    reader.close()
                    opened.rewind(source.path)
            if reader is None or inferred:  # the inferred float columns read as text
                options = replace(options, rendered={**options.rendered, **inferred})
                reader = csv_reader(opened.stream, options, options.reader_types(), source.path)
            source.schema = reader.schema
            for batch in reader:
                yield _converted(_nulls_in_strings(batch, options), options, inferred)
        elif options.rendered or options.free:
            from merkle.cli.typedjson import read_typed_json

            plain = {n: k for n, k in types.items() if n not in options.rendered}
            typed = read_typed_json(
                stream, BLOCK_SIZE, plain, options.rendered, options.key_fields, options.free
            )
            for batch in typed:
                if source.schema is None:
                    source.schema = batch.schema
                yield batch
        else:
            parse = pajson.ParseOptions(
                explicit_schema=pa.schema(list(types.items())) if types else None,
                unexpected_field_behavior="infer",
            )
            try:
                reader = pajson.open_json(
                    stream,
                    read_options=pajson.ReadOptions(block_size=BLOCK_SIZE),
                    parse_options=parse,
                )
            except pa.ArrowInvalid as exc:
                if str(exc).strip() == "Empty JSON stream":  # no rows: nothing to load, as
                    return  # `merkle scan -f jsonl` writes an empty table (CSV: a header)
                raise
            source.schema = reader.schema
            yield from reader
    finally:
        if reader is not None:
            reader.close()
        opened.close()


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
    opened = Input(source.path)
    try:
        reader = csv_reader(opened.stream, plain, dict(options.column_types), source.path)
        try:
            schema = reader.schema
        finally:
            reader.close()
    except (pa.ArrowException, OSError, ValueError):
        return {}  # the main read reports it
    finally:
        opened.close()
    return {name: schema.field(name).type for name in names if name in schema.names}


def key_values(batch: pa.RecordBatch, key_fields: Sequence[str]) -> list[Any]:
    """The key of every row of a batch (tuples for a composite key)."""
    columns = [batch.column(name).to_pylist() for name in key_fields]
    return columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
