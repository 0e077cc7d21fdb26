"""``merkle load``: stream CSV, JSON Lines or Parquet files into a table, one commit.

Files are read by pyarrow's streaming readers (``merkle.cli.sources``) and
each Arrow record batch goes to ``Database.write`` as it is: no per-row
Python except the duplicate-key check. Gzip, bz2, zstd and lz4 files (by
extension) are decompressed on the fly; ``-`` reads CSV or JSON Lines from
stdin. When the table's key codec is known (an existing table, or
``--key-codec``), the key column is read as that codec's Arrow type, so
"007" stays a string key in a ``str`` table. A key that occurs twice in one
load is an error unless ``--on-duplicate first|last`` says which row wins
(then the rows dropped are counted in the summary line). Values JSON has no
type for, written by ``merkle scan`` as text (hex bytes, ISO-8601 times,
durations, ``"NaN"``), are read back by the type the table (or
``--column-types``) gives their field (``merkle.cli.rendered``), so that an
export loads back as the records it came from. When another commit creates
the table while this load creates it too, the load is written into that table
if it has the load's key (as ``Database.commit`` replays a write on a moved
head), and is a one-line error naming the table's key if not.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

import click
import pyarrow as pa

from merkle.cli.advice import for_cli
from merkle.cli.common import (
    CliError,
    commit_options,
    names_text,
    open_db,
    say,
    split_names,
    table_key,
)
from merkle.cli.inferred import check_inferred, explain_later
from merkle.cli.output import cell
from merkle.cli.readerrors import bad_value, read_error
from merkle.cli.rendered import BadValueError, is_binary, needs_converting
from merkle.cli.sources import (
    INPUT_FORMATS,
    ReadOptions,
    Source,
    check_content,
    detect_format,
    key_values,
    parse_types,
    peek_types,
    read_batches,
)
from merkle.errors import ConflictError, MerkleError
from merkle.tablets.keys import key_codec as codec_of
from merkle.tablets.schema import is_free

__all__ = ["INPUT_FORMATS", "detect_format", "load"]

#: What ``--on-duplicate`` may say.
DUPLICATE_POLICIES = ("error", "first", "last")


def _key_types(spec: str | None, key_fields: list[str], fmt: str) -> dict[str, pa.DataType]:
    """The Arrow types the key columns are read as: the codec's. A timestamp key of a
    Parquet file is left as the file has it; in text it is read as ISO-8601, with or
    without a zone (none means UTC, as a key typed on the command line)."""
    if spec is None:
        return {}
    arrow_type = codec_of(spec).arrow_type
    types = [arrow_type] if len(key_fields) == 1 else [f.type for f in arrow_type]
    if len(key_fields) == 1 and pa.types.is_struct(arrow_type):
        return {}  # a tuple-valued key field: read as the file has it
    return {
        name: kind
        for name, kind in zip(key_fields, types, strict=True)
        if fmt != "parquet" or not pa.types.is_timestamp(kind)
    }


def _schema_types(
    schema: pa.Schema | None, fmt: str
) -> tuple[dict[str, pa.DataType], dict[str, pa.DataType]]:
    """The table's field types that the reader of ``fmt`` parses directly (numbers, strings,
    dates, ...), and those of the fields read as the text ``merkle scan`` writes for them
    and converted (``merkle.cli.rendered``: bytes as hex, durations, ...; not Parquet's)."""
    if schema is None:
        return {}, {}
    plain = (
        pa.types.is_integer,
        pa.types.is_floating,
        pa.types.is_decimal,
        pa.types.is_string,
        pa.types.is_large_string,
        pa.types.is_boolean,
        pa.types.is_date,
    )
    direct: dict[str, pa.DataType] = {}
    rendered: dict[str, pa.DataType] = {}
    for f in schema:
        if is_free(f):
            continue
        if fmt != "parquet" and needs_converting(f.type, fmt):
            rendered[f.name] = f.type
        elif any(check(f.type) for check in plain):
            direct[f.name] = f.type
    return direct, rendered


class _Duplicates:
    """Keys seen in this load, and the rows dropped (or refused) because a key came again."""

    def __init__(self, policy: str, key_fields: list[str]) -> None:
        self.policy = policy
        self.key_fields = key_fields
        self.seen: dict[Any, str] = {}  # key -> where it was first read
        self.dropped = 0

    def filter(self, batch: pa.RecordBatch, path: str, first_row: int) -> pa.RecordBatch:
        """``batch`` without the rows whose key was read before (or CliError, by the policy)."""
        keys = key_values(batch, self.key_fields)
        keep = []
        for i, value in enumerate(keys):
            parts = value if isinstance(value, tuple) else (value,)
            if any(isinstance(part, dict | list) for part in parts):
                kind = "an object" if any(isinstance(p, dict) for p in parts) else "an array"
                raise CliError(
                    f"{path}: row {first_row + i}: the key {self._label()} is {kind}, "
                    f"{_shown(value)}; a key is a number, string, bytes or timestamp: "
                    "choose another --key field"
                )
            where = self.seen.get(value)
            if where is None:
                self.seen[value] = f"{path} row {first_row + i}"
                keep.append(True)
                continue
            if self.policy == "error":
                raise CliError(
                    f"{path}: row {first_row + i}: key {_shown(value)} was already read at "
                    f"{where}; "
                    "a load writes each key once: pass --on-duplicate first or last to choose "
                    "which row wins"
                )
            self.dropped += 1
            keep.append(self.policy == "last")
        if self.policy == "first" and not all(keep):
            return batch.filter(pa.array(keep))
        return batch

    def _label(self) -> str:
        return repr(self.key_fields[0]) if len(self.key_fields) == 1 else repr(self.key_fields)


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
    "keys",
    multiple=True,
    metavar="FIELD",
    help="The primary-key field (needed when the table does not exist yet). A key of "
    "several fields: --key a,b or --key a --key b.",
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
@click.option(
    "--delimiter",
    default=None,
    metavar="CHAR",
    help="CSV field delimiter (default ',', or tab for .tsv files; 'tab' or '\\t' for tab).",
)
@click.option(
    "--null-values",
    default=None,
    metavar="A,B",
    help="CSV cells that mean no value, besides the empty cell (never applied to the key).",
)
@click.option(
    "--column-types",
    "--schema",
    "column_types",
    default=None,
    metavar="NAME:TYPE,...",
    help="Arrow types of columns, e.g. id:int32,amount:decimal128(10,2) (default: inferred).",
)
@click.option(
    "--on-duplicate",
    type=click.Choice(DUPLICATE_POLICIES),
    default="error",
    help="A key read twice: an error (default), or the first or last row wins.",
)
@commit_options
def load(
    db: str,
    table: str,
    files: tuple[str, ...],
    keys: tuple[str, ...],
    key_codec: str | None,
    fmt: str | None,
    delimiter: str | None,
    null_values: str | None,
    column_types: str | None,
    on_duplicate: str,
    message: str | None,
    author: str | None,
) -> None:
    """Load FILEs (CSV, JSON Lines, Parquet) into TABLE of database DB, in one commit.

    Records are upserted by their key. The table is created (keyed by --key)
    when it does not exist. A progress bar shows on a terminal.
    """
    formats = [detect_format(path, fmt) for path in files]
    for path, f in zip(files, formats, strict=True):
        check_content(path, f)
    key = split_names(keys, "--key") if keys else []
    database = open_db(db)
    base_version = database.version
    created = table not in database.list_tables()
    if created:
        if not key:
            raise CliError(
                f"table {table!r} does not exist in database {db!r}: pass --key FIELD to create it"
            )
        database = database.create_table(
            table, key=key[0] if len(key) == 1 else key, key_codec=key_codec
        )
    key_fields, spec = table_key(database, table)
    if key and key != key_fields:
        raise CliError(f"table {table!r} is keyed by {_show(key_fields)}, not {_show(key)}")
    if not created and key_codec is not None and codec_of(key_codec).spec != spec:
        raise CliError(
            f"table {table!r} exists with key codec {spec or 'none yet'}; --key-codec "
            "only applies when load creates the table"
        )
    delimiter = "\t" if delimiter in ("tab", "\\t") else delimiter
    if delimiter is not None and len(delimiter) != 1:
        raise CliError(f"--delimiter must be one character, got {delimiter!r}")
    # An empty cell is always no value; --null-values adds to it.
    nulls = ("", *(v for v in (null_values or "").split(",") if v))
    declared = parse_types(column_types, "--column-types")
    sources = [
        Source(path, f, 0 if path == "-" else os.path.getsize(path))
        for path, f in zip(files, formats, strict=True)
    ]
    duplicates = _Duplicates(on_duplicate, key_fields)
    # The batches written into a table this load creates: a concurrent load that creates
    # it first makes the commit fail, and they are then written into that table (the
    # transaction holds them until it commits anyway).
    written: list[pa.RecordBatch] | None = [] if created else None
    rows = 0
    with _Progress(sum(s.size for s in sources)) as progress:
        before = 0
        for source in sources:
            # Each file is read with the types the table has by now, as a load of its own
            # would be: a new table's first file gives it the types the next ones are read as.
            options, binary_ok = _read_options(database, table, declared, delimiter, nulls, source)
            read = 0
            schema: pa.Schema | None = None
            try:
                for batch in read_batches(source, options):
                    if schema is None:
                        _check_columns(batch.schema, source.path, key_fields)
                        check_inferred(batch, source, options, binary_ok, read + 1)
                    schema = batch.schema
                    kept = duplicates.filter(batch, source.path, read + 1)
                    if kept.num_rows:
                        database = database.write(table, kept)
                        if written is not None:
                            written.append(kept)
                    read += batch.num_rows
                    progress.advance(batch.num_rows, before + source.consumed(read))
            except BadValueError as exc:
                raise CliError(bad_value(source, exc, read)) from None
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                free = _free_commands(db, table, key_fields, created)
                said = read_error(source, options, schema, read, exc, free)
                raise CliError(explain_later(said, source, options, schema, read)) from None
            except MerkleError as exc:
                advice = for_cli(str(exc), db, table)
                raise CliError(
                    f"{source.path}, rows {read + 1}-{read + batch.num_rows}: {advice}"
                ) from None
            if schema is None and source.schema is not None and source.schema.names:
                _check_columns(source.schema, source.path, key_fields)  # a header, no rows
            rows += read
            before += source.size
    if not database.dirty:
        say(f"nothing to load into {db}.{table}: the files hold no rows")
        return
    message = message or f"load {rows} rows into {table} from {_describe_files(files)}"
    note = ""
    try:
        done = database.commit(message=message, author=author)
    except ConflictError:
        if written is None:
            raise
        base = open_db(db)
        if table not in base.list_tables():
            raise  # not a table created meanwhile: the conflict as the API words it
        done = _into_created(base, db, table, key_fields, key_codec, written, message, author)
        base_version, created = base.version, False
        note = f"; {db}.{table} was created meanwhile by another commit (version {base.version})"
    if done.version == base_version and not created:
        say(
            f"no change: {db}.{table} already holds these {rows:,} rows "
            f"(still version {done.version})"
        )
        return
    dropped = duplicates.dropped
    if dropped:
        winner = "first" if on_duplicate == "first" else "last"
        note += (
            f"; {dropped:,} rows repeated a key and were dropped (the {winner} row of each key won)"
        )
    say(f"loaded {rows - dropped:,} rows into {db}.{table} (version {done.version}){note}")


def _into_created(
    base: Any,
    db: str,
    table: str,
    key: list[str],
    key_codec: str | None,
    batches: list[pa.RecordBatch],
    message: str,
    author: str | None,
) -> Any:
    """The load's ``batches`` written into ``table`` as another commit created it while
    this load created it too (``base``: the new head), and committed: the load is
    replayed, as ``Database.commit`` replays a write on a moved head, when the table
    has the key (and key codec) the load has; a CliError naming the table's key if not.
    """
    fields, spec = table_key(base, table)
    meanwhile = (
        f"table {table!r} was created in database {db!r} by another commit (version "
        f"{base.version}) while this load created it"
    )
    if fields != key:
        raise CliError(
            f"{meanwhile}, keyed by {_show(fields)}, not {_show(key)}: nothing was loaded; "
            f"load into it with --key {names_text(fields)}, or into another table"
        )
    if key_codec is not None and spec is not None and codec_of(key_codec).spec != spec:
        raise CliError(
            f"{meanwhile}, with key codec {spec}, not {codec_of(key_codec).spec}: nothing "
            f"was loaded; load into it without --key-codec, or into another table"
        )
    database = base
    try:
        for batch in batches:
            database = database.write(table, batch)
    except MerkleError as exc:
        raise CliError(
            f"{meanwhile}, and these rows do not fit it: {for_cli(str(exc), db, table)}; "
            "nothing was loaded"
        ) from None
    return database.commit(message=message, author=author)


def _read_options(
    database: Any,
    table: str,
    declared: dict[str, pa.DataType],
    delimiter: str | None,
    nulls: tuple[str, ...],
    source: Source,
) -> tuple[ReadOptions, list[str]]:
    """How ``source`` is read into ``table`` as the table is now, and the columns that
    may be binary (the table's binary fields, and those declared binary)."""
    key_fields, spec = table_key(database, table)
    table_schema = database.describe_table(table)["schema"]
    direct, rendered = _schema_types(table_schema, source.fmt)
    # A schema-free field of JSON Lines is read as the JSON values it holds: it has no
    # type, and a type --column-types gives it (as an error's advice once said) is not used.
    free = tuple(f.name for f in table_schema or () if is_free(f)) if source.fmt == "jsonl" else ()
    declared = {n: k for n, k in declared.items() if n not in free}
    key_types = _key_types(spec, key_fields, source.fmt)
    if source.fmt != "parquet":  # a key is written as on the command line: bytes as hex
        keyed = {n: k for n, k in key_types.items() if needs_converting(k, source.fmt)}
        rendered = {**keyed, **rendered}
    # A type --column-types gives wins; its values are read as the table's are, but for
    # binary: the cells' bytes as they are (the way to store text that is not UTF-8).
    given = {
        name: kind
        for name, kind in declared.items()
        if source.fmt != "parquet" and needs_converting(kind, source.fmt) and not is_binary(kind)
    }
    rendered = {n: k for n, k in rendered.items() if n not in declared} | given
    options = ReadOptions(
        tuple(key_fields),
        {n: k for n, k in key_types.items() if n not in rendered},
        {**direct, **{n: k for n, k in declared.items() if n not in given}},
        delimiter,
        nulls,
        rendered,
        free,
    )
    unknown = [n for n in key_fields if n not in options.key_types and n not in rendered]
    if unknown and nulls != ("",):
        # A new key: learn its type without null values, so they never touch it.
        learned = peek_types(source, options, unknown)
        options = replace(options, key_types={**options.key_types, **learned})
    binary = [f.name for f in table_schema or () if is_binary(f.type)]
    binary += [name for name, kind in declared.items() if is_binary(kind)]
    return options, binary


def _free_commands(db: str, table: str, key_fields: list[str], created: bool) -> Any:
    """The commands that make a field schema-free before the load is run again: a table
    this load creates is created with it (``--schema-free``); an existing one gets the
    field, then makes it free (``table alter`` changes a field one way per call)."""
    if created:
        key = ",".join(names_text([name]) for name in key_fields)
        return lambda name: (
            f"create the table first: merkle table create {db} {table} --key {key} "
            f"--schema-free {names_text([name])}, then load into it"
        )
    return lambda name: (
        f"merkle table alter {db} {table} --add {names_text([name])}:string, then "
        f"merkle table alter {db} {table} --free {names_text([name])}"
    )


def _check_columns(schema: pa.Schema, path: str, key_fields: list[str]) -> None:
    """CliError when a file's columns repeat a name or lack a key field."""
    names = schema.names
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise CliError(
            f"{path}: its header names column {repeated[0]!r} {names.count(repeated[0])} times; "
            "a record has each field once: rename the repeated columns"
        )
    for name in key_fields:
        if name not in names:
            raise CliError(f"{path} has no column {name!r}, a key field (columns: {names})")


def _show(fields: list[str]) -> str:
    return repr(fields[0]) if len(fields) == 1 else repr(fields)


def _shown(key: Any) -> str:
    """A key read from a file as the CLI prints keys (``merkle.cli.output.cell``, as
    ``merkle scan`` and ``merkle get`` do: a timestamp in ISO-8601, bytes in hex, a
    composite key as a JSON array), so that it can be pasted into ``merkle get``;
    cut to 60 characters."""
    text = cell(key)
    return text if len(text) <= 60 else text[:57] + "..."
