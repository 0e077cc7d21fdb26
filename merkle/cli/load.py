"""``merkle load``: stream CSV, JSON Lines or Parquet files into a table, one commit.

Files are read by pyarrow's streaming readers (``pyarrow.csv.open_csv``,
``pyarrow.json.open_json``, ``pyarrow.parquet.ParquetFile.iter_batches``) and
each Arrow record batch goes to ``Database.write`` as it is: no per-row
Python. Gzip, bz2, zstd and lz4 files (by extension) are decompressed on the
fly; ``-`` reads CSV or JSON Lines from stdin. When the table's key codec is
known (an existing table, or ``--key-codec``), the key column is read as that
codec's Arrow type, so "007" stays a string key in a ``str`` table.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import click
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from merkle.cli.common import CliError, commit_options, open_db, say, table_key
from merkle.errors import MerkleError
from merkle.tablets.keys import key_codec as codec_of

__all__ = ["INPUT_FORMATS", "detect_format", "load"]

#: Input formats, and the file extensions that select them.
INPUT_FORMATS = {"csv": (".csv",), "jsonl": (".jsonl", ".ndjson"), "parquet": (".parquet", ".pq")}
#: Compressed files, by extension: the Arrow codec that reads them.
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}
#: Bytes per block of the CSV and JSON readers (one record batch each).
_BLOCK_SIZE = 4 << 20


def _split_compression(path: str) -> tuple[str, str | None]:
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
    name, _ = _split_compression(path)
    ext = os.path.splitext(name)[1].lower()
    for fmt, extensions in INPUT_FORMATS.items():
        if ext in extensions:
            return fmt
    known = ", ".join(e for exts in INPUT_FORMATS.values() for e in exts)
    raise CliError(
        f"cannot tell the format of {path} from its extension ({known}): "
        "pass --format csv, jsonl or parquet"
    )


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
class _Source:
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
    """An Arrow input stream over ``path`` (or stdin), decompressed by extension."""
    raw: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    counter = _CountingReader(raw)
    stream: Any = pa.PythonFile(counter, mode="r")
    codec = _split_compression(path)[1] if path != "-" else None
    if codec is not None:
        stream = pa.CompressedInputStream(stream, codec)
    return stream, counter


def _batches(
    source: _Source, key_field: str, key_type: pa.DataType | None
) -> Iterator[pa.RecordBatch]:
    """The record batches of one file."""
    if source.fmt == "parquet":
        if source.path == "-":
            raise CliError("parquet cannot be read from stdin: name the file")
        source.parquet = pq.ParquetFile(source.path)
        try:
            yield from source.parquet.iter_batches(batch_size=65536)
        finally:
            source.parquet.close()
        return
    stream, source.counter = _open_text(source.path)
    try:
        if source.fmt == "csv":
            forced = key_type is not None and not pa.types.is_timestamp(key_type)
            convert = pacsv.ConvertOptions(
                column_types={key_field: key_type} if forced else None,
                strings_can_be_null=True,  # an empty cell is no value: the field is absent
            )
            reader = pacsv.open_csv(
                stream,
                read_options=pacsv.ReadOptions(block_size=_BLOCK_SIZE),
                convert_options=convert,
            )
        else:
            parse = pajson.ParseOptions(
                explicit_schema=pa.schema([(key_field, key_type)]) if key_type else None,
                unexpected_field_behavior="infer",
            )
            reader = pajson.open_json(
                stream, read_options=pajson.ReadOptions(block_size=_BLOCK_SIZE), parse_options=parse
            )
        yield from reader
    finally:
        if source.path != "-":
            source.counter.raw.close()


def _key_type(spec: str | None) -> pa.DataType | None:
    """The Arrow type the key column is read as: the codec's, for a scalar codec."""
    if spec is None:
        return None
    arrow_type = codec_of(spec).arrow_type
    return None if pa.types.is_struct(arrow_type) else arrow_type


class _Progress:
    """A progress bar on stderr (bytes of input, showing rows loaded), only on a terminal."""

    def __init__(self, total_bytes: int) -> None:
        self.rows = 0
        self.done = 0
        stderr = sys.stderr
        self.bar: Any = None
        if total_bytes > 0 and stderr.isatty():
            self.bar = click.progressbar(
                length=total_bytes,
                label="loading",
                file=stderr,
                show_percent=True,
                item_show_func=lambda rows: None if rows is None else f"{rows:,} rows",
            )

    def __enter__(self) -> _Progress:
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def advance(self, rows: int, done_bytes: int) -> None:
        """``rows`` more rows loaded; ``done_bytes`` of the input consumed so far."""
        self.rows += rows
        if self.bar is not None:
            self.bar.update(max(0, done_bytes - self.done), self.rows)
        self.done = max(self.done, done_bytes)


def _describe_files(paths: tuple[str, ...]) -> str:
    names = [("stdin" if p == "-" else os.path.basename(p)) for p in paths]
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} files"


@click.command(short_help="Load CSV, JSON Lines or Parquet files into a table.")
@click.argument("db")
@click.argument("table")
@click.argument(
    "files",
    nargs=-1,
    required=True,
    metavar="FILE...",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
)
@click.option(
    "--key",
    "key",
    default=None,
    metavar="FIELD",
    help="The primary-key field (needed when the table does not exist yet).",
)
@click.option(
    "--key-codec",
    default=None,
    metavar="SPEC",
    help="Key codec of a new table (default: inferred from the data).",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(list(INPUT_FORMATS)),
    default=None,
    help="Input format (default: from each file's extension).",
)
@commit_options
def load(
    db: str,
    table: str,
    files: tuple[str, ...],
    key: str | None,
    key_codec: str | None,
    fmt: str | None,
    message: str | None,
    author: str | None,
) -> None:
    """Load FILEs (CSV, JSON Lines, Parquet) into TABLE of database DB, in one commit.

    Records are upserted by their key. The table is created (keyed by --key)
    when it does not exist. A progress bar shows on a terminal.
    """
    formats = [detect_format(path, fmt) for path in files]
    database = open_db(db)
    created = table not in database.list_tables()
    if created:
        if key is None:
            raise CliError(
                f"table {table!r} does not exist in database {db!r}: pass --key FIELD to create it"
            )
        database = database.create_table(table, key=key, key_codec=key_codec)
    key_field, spec = table_key(database, table)
    if key is not None and key != key_field:
        raise CliError(f"table {table!r} is keyed by {key_field!r}, not {key!r}")
    if not created and key_codec is not None and codec_of(key_codec).spec != spec:
        raise CliError(
            f"table {table!r} exists with key codec {spec or 'none yet'}; --key-codec "
            "only applies when load creates the table"
        )
    key_type = _key_type(spec)
    sources = [
        _Source(path, f, 0 if path == "-" else os.path.getsize(path))
        for path, f in zip(files, formats, strict=True)
    ]
    rows = 0
    with _Progress(sum(s.size for s in sources)) as progress:
        before = 0
        for source in sources:
            read = 0
            try:
                for batch in _batches(source, key_field, key_type):
                    if batch.num_rows:
                        database = database.write(table, batch)
                        read += batch.num_rows
                    progress.advance(batch.num_rows, before + source.consumed(read))
            except (pa.ArrowException, OSError) as exc:
                raise CliError(f"cannot read {source.path} as {source.fmt}: {exc}") from None
            except MerkleError as exc:
                raise CliError(f"{source.path}: {exc}") from None
            rows += read
            before += source.size
    if not database.dirty:
        say(f"nothing to load into {db}.{table}: the files hold no rows")
        return
    done = database.commit(
        message=message or f"load {rows} rows into {table} from {_describe_files(files)}",
        author=author,
    )
    say(f"loaded {rows:,} rows into {db}.{table} (version {done.version})")
