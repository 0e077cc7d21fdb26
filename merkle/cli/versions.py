"""Versions as data on the command line: diff, merge, tag, push, pull, export, import.

Thin layers over ``Database.diff``, ``Connection.merge``, ``Connection.tag``,
:func:`merkle.sync` and :mod:`merkle.transfer.car`; see doc/versions.md.
"""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Any

import click

import merkle
from merkle.cli.common import (
    CliError,
    CliState,
    commit_options,
    connection,
    parse_fields,
    parse_store_option,
    say,
)
from merkle.cli.output import emit_rows, format_option
from merkle.tablets.nanotext import nanos_as_text

if TYPE_CHECKING:
    from merkle.db.diff import TableDiff
    from merkle.refs.tags import Tag
    from merkle.tablets.table import Table

__all__ = ["COMMANDS", "diff", "export", "import_", "merge", "pull", "push", "tag"]


@click.command("diff")
@click.argument("db")
@click.argument("v1", type=click.IntRange(min=0), required=False)
@click.argument("v2", type=click.IntRange(min=0), required=False)
@click.option("--table", "-t", default=None, help="Only this table.")
@click.option(
    "--fields",
    multiple=True,
    metavar="A,B,...",
    help="Compare and show only these fields (as scan's --fields).",
)
@click.option("--stat", is_flag=True, help="Only the counts per table, not the records.")
@format_option
def diff(
    db: str,
    v1: int | None,
    v2: int | None,
    table: str | None,
    fields: tuple[str, ...],
    stat: bool,
    fmt: str | None,
) -> None:
    """Records that changed in DB from version V1 to V2.

    With no version: what the head's commit changed (GC fence entries, which
    repeat the version below them, are skipped); with V1 only: from V1 to the
    head. One row per record: table, key, change, old, new; a change of the
    database metadata and of a table's settings (schema, metadata, families,
    limits, key) is a row too, before the table's records.
    """
    conn = connection()
    new = conn.open_db(db, version=v2) if v2 is not None else conn.open_db(db)
    if v1 is None:
        from merkle.db.ancestry import drop_below, last_change

        entry = new.entry  # a copy each time it is read: ``made is entry`` below
        made = last_change(conn, entry)
        # A version that created the database again follows its drop: a new line, with
        # no parent either (diffing against the drop would say the live one is dropped).
        drop = drop_below(conn, made)
        if made.parent is None or drop is not None:
            fence = "" if made is entry else f" is a gc fence over version {made.version}"
            again = (
                ""
                if drop is None
                else f" created the database again after its drop at version {drop.version}, so it"
            )
            which = ", which" if fence else ""
            raise CliError(
                f"version {new.version} of {db!r}{fence}{which}{again} has no parent: name V1"
            )
        v1 = made.parent
    changes = new.diff(v1, table=table, fields=parse_fields(fields))
    meta = changes.metadata_changed and table is None  # the database's, not the table's
    if stat:
        summary = changes.summary()
        rows = [
            {"table": name, **counts, "status": _status(changes.tables[name])}
            for name, counts in summary["rows"].items()
        ]
        if meta:
            counts = {"inserted": 0, "updated": 0, "deleted": 0}
            rows.insert(0, {"table": None, **counts, "status": "metadata changed"})
        emit_rows(rows, fmt, columns=["table", "inserted", "updated", "deleted", "status"])
        return

    def records() -> Any:
        if meta:
            old, now = changes.old.metadata, changes.new.metadata
            yield {"table": None, "key": None, "change": "metadata", "old": old, "new": now}
        for name, table_diff in changes.tables.items():
            settings = _settings_row(name, table_diff)
            if settings is not None:
                yield settings
            for rec in table_diff.iter_records():
                yield {"table": name, **rec}

    # Every row has exactly these columns, so csv streams as json and jsonl do.
    columns = ["table", "key", "change", "old", "new"]
    with nanos_as_text():  # a time with nanoseconds as its exact text, as scan prints it
        emit_rows(records(), fmt, columns=columns, fixed=True)


def _status(table: TableDiff) -> str:
    """A table's ``--stat`` status: created, dropped, rekeyed or changed, with the
    settings that changed in brackets (``changed (schema)``)."""
    altered = [name for name in table.altered if name != "key" or table.status != "rekeyed"]
    return f"{table.status} ({', '.join(altered)})" if altered else table.status


def _settings_row(name: str, table: TableDiff) -> dict[str, Any] | None:
    """The row of a table created, dropped or re-keyed, or whose settings changed (its
    schema, metadata, families, limits): ``old`` and ``new`` hold each changed setting.
    None for a table whose records alone changed."""
    status = table.status
    if status in ("created", "dropped"):
        return {"table": name, "key": None, "change": status, "old": None, "new": None}
    if not table.altered:
        return None
    assert table.old is not None
    assert table.new is not None
    old = {setting: _setting(table.old, setting) for setting in table.altered}
    new = {setting: _setting(table.new, setting) for setting in table.altered}
    change = "rekeyed" if status == "rekeyed" else "altered"
    return {"table": name, "key": None, "change": change, "old": old, "new": new}


def _setting(table: Table, setting: str) -> Any:
    """One setting of a table version as the diff shows it (see ``TableDiff.altered``)."""
    from merkle.cli.table import show_schema

    root = table.root
    if setting == "schema":
        return show_schema(root.schema)
    if setting == "metadata":
        return root.meta
    if setting == "families":
        return {family: sorted(names) for family, names in root.families.items()}
    if setting == "limits":  # named as `table describe` names them
        limits = root.limits
        return {
            "tablet_size_limit": limits.tablet_size,
            "branching_factor": limits.branching,
            "patch_limit": limits.patch,
            "patch_share": limits.patch_share,
        }
    if setting == "key":
        fields = root.key_fields
        return {"field": list(fields) if len(fields) > 1 else fields[0], "codec": root.key_codec}
    return root.uid  # "replaced": dropped and created again, a new identity


@click.command("merge")
@click.argument("source")
@click.argument("into")
@click.option(
    "--resolve",
    type=click.Choice(["fail", "ours", "theirs"]),
    default="fail",
    show_default=True,
    help="How to settle keys changed differently on both sides.",
)
@click.option(
    "--base",
    type=click.IntRange(min=0),
    default=None,
    help=(
        "Version of INTO to merge from (for unrelated databases, or a criss-cross "
        "whose merge bases cannot be merged into one)."
    ),
)
@commit_options
def merge(
    source: str, into: str, resolve: str, base: int | None, message: str | None, author: str | None
) -> None:
    """Merge database SOURCE into INTO from their common ancestor (one commit, two parents)."""
    conn = connection()
    before = conn.open_db(into).version
    try:
        merged = conn.merge(
            source, into, base=base, resolve=resolve, message=message, author=author
        )
    except merkle.errors.MergeConflictError as exc:
        from merkle.cli.mergeconflicts import conflict_line  # only when a merge conflicts

        raise CliError(conflict_line(exc, source, into)) from None
    if merged.version == before:
        say(f"{into!r} already has everything of {source!r}; nothing to merge")
    else:
        say(f"merged {source!r} into {into!r} as version {merged.version}")


@click.command("tag")
@click.argument("args", nargs=-1, required=True)
@click.option(
    "--version", type=click.IntRange(min=0), default=None, help="Tag version N (default: the head)."
)
@click.option("--message", "-m", default=None, help="A note kept with the tag.")
@format_option
def tag(args: tuple[str, ...], version: int | None, message: str | None, fmt: str | None) -> None:
    """Tag a version: `tag DB NAME [--version N]`, `tag list DB`, `tag delete DB NAME`.

    A tagged version is never trimmed or collected, whatever the retention. A
    database named `list`, `delete` or `create` is tagged with the explicit
    form `tag create DB NAME`. `tag delete DB` (NAME forgotten) is a usage error,
    and so is `tag create DB` unless a database `create` exists and DB names none.
    """
    verb = args[0] if len(args) >= 2 and args[0] in _TAG_VERBS else None
    if verb in ("list", "delete") and (version is not None or message is not None):
        raise click.UsageError(_tag_verb_advice(verb, args[1:]))
    if verb == "delete" and len(args) == 2:
        raise click.UsageError(_missing_tag_name(verb, args[1]))
    conn = connection()
    if verb == "create" and len(args) == 2 and not _tags_database_create(conn, args[1]):
        raise click.UsageError(_missing_tag_name(verb, args[1]))
    if verb == "list" and len(args) == 2:
        rows = [
            {
                "name": t.name,
                "version": t.version,
                "time": t.time,
                "message": t.message,
                "root": t.root,
            }
            for t in _tags_of(conn, args[1])
        ]
        emit_rows(rows, fmt, columns=["name", "version", "time", "message", "root"])
    elif verb == "delete" and len(args) == 3:
        gone = conn.delete_tag(args[1], args[2])
        what = "its object was damaged" if gone is None else f"version {gone.version}"
        say(f"deleted tag {args[2]!r} ({what}) of {args[1]!r}")
    elif len(args) == 2 or (verb == "create" and len(args) == 3):
        db, name = args[-2:]
        made = conn.tag(db, name, version, message=message)
        say(f"tagged version {made.version} of {db!r} as {made.name!r}")
    else:
        raise click.UsageError(
            "use `tag DB NAME [--version N]` (or `tag create DB NAME`), `tag list DB` "
            "or `tag delete DB NAME`"
        )


_TAG_VERBS = ("list", "delete", "create")


def _tag_verb_advice(verb: str, rest: tuple[str, ...]) -> str:
    """Why ``tag list|delete`` refuses --version/-m, and the commands (shell-quoted)
    that the arguments ``rest`` fit: the verb without the options, or tagging a
    database named ``verb`` (``tag create VERB NAME``, one NAME only)."""
    ways = []
    if len(rest) == (1 if verb == "list" else 2):
        what = "list its tags" if verb == "list" else "delete the tag"
        ways.append(f"to {what}, use `{shlex.join(['merkle', 'tag', verb, *rest])}`")
    if len(rest) == 1:
        create = shlex.join(["merkle", "tag", "create", verb, *rest])
        ways.append(f"to tag a database named {verb!r}, use `{create}` with them")
    advice = "; ".join(ways) or "use `tag list DB` or `tag delete DB NAME`"
    return f"`tag {verb}` takes no --version or -m: {advice}"


def _tags_database_create(conn: merkle.Connection, word: str) -> bool:
    """Whether ``tag create WORD`` is ``tag DB NAME`` of a database named ``create``
    (one exists, and WORD names no database), not ``tag create DB NAME`` with the
    NAME forgotten. (``tag delete WORD`` never is: a delete must not make a tag.)"""
    names = conn.list_dbs()
    return "create" in names and word not in names


def _missing_tag_name(verb: str, db: str) -> str:
    """``tag delete DB`` / ``tag create DB``: the tag NAME was forgotten. (They were
    read as tagging a database named ``delete`` / ``create``, which made a tag when
    one existed.) The explicit form tags such a database."""
    fixed = shlex.join(["merkle", "tag", verb, db, "NAME"])
    other = shlex.join(["merkle", "tag", "create", verb, db])
    return (
        f"`tag {verb} DB NAME` is missing the tag NAME after {db!r}: use `{fixed}`; to tag "
        f"a database named {verb!r} as {db!r}, use `{other}`"
    )


def _tags_of(conn: merkle.Connection, db: str) -> list[Tag]:
    """The tags of ``db``; when there is no such database but one named ``list`` exists,
    the error says how to tag that one instead."""
    try:
        return conn.tags(db)
    except merkle.errors.NotFoundError as exc:
        if "list" in conn.list_dbs():
            exc.add_note(
                f"to tag database 'list' as {db!r}, use `merkle tag create list {shlex.quote(db)}`"
            )
        raise


def _other_lake(uri: str, create: bool, other_options: tuple[str, ...]) -> merkle.Connection:
    """The lake at ``uri``; a location that holds no lake is an error unless ``create``
    (``--create``): a mistyped --to makes no lake.

    Its storage options are ``--other-option``'s when given; else the lake's own
    (``--option``) when both lakes have one scheme (two buckets on one S3
    endpoint), and none when they differ (a file lake takes no endpoint_url).
    """
    if other_options:
        options = dict(parse_store_option(text) for text in other_options)
    else:
        state = click.get_current_context().find_root().find_object(CliState)
        mine = dict(state.options) if state is not None else {}
        options = mine if _scheme(uri) == _scheme(connection().uri) else {}
    return merkle.connect(uri, create=create, **options)


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


#: ``--other-option``: storage options of the other lake of a push or pull.
other_option = click.option(
    "--other-option",
    "-O",
    "other_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="A storage option of the other lake (default: this lake's --option values when "
    "both lakes have one scheme). Repeatable.",
)


#: ``--create``: the one way besides ``db create`` to start a lake, said in so many words.
create_option = click.option(
    "--create",
    is_flag=True,
    help="Make the destination lake if its location holds none (else that is an error).",
)


def _progress_sync(
    src: merkle.Connection,
    dst: merkle.Connection,
    db: str,
    as_name: str | None,
    version: int | None,
) -> None:
    report = merkle.sync(src, dst, db, version=version, as_name=as_name)
    say(report.summary())


@click.command("push")
@click.argument("db")
@click.option("--to", "to", required=True, metavar="LAKE", help="The destination lake URI.")
@click.option("--as", "as_name", default=None, metavar="NAME", help="Name it NAME there.")
@click.option(
    "--version",
    type=click.IntRange(min=0),
    default=None,
    help="Send only version N (default: the retained history).",
)
@create_option
@other_option
def push(
    db: str,
    to: str,
    as_name: str | None,
    version: int | None,
    create: bool,
    other_options: tuple[str, ...],
) -> None:
    """Copy DB to the lake LAKE, sending only the blocks it lacks."""
    src = connection()
    with _other_lake(to, create, other_options) as dst:
        _progress_sync(src, dst, db, as_name, version)


@click.command("pull")
@click.argument("lake")
@click.argument("db")
@click.option("--as", "as_name", default=None, metavar="NAME", help="Name it NAME here.")
@click.option(
    "--version",
    type=click.IntRange(min=0),
    default=None,
    help="Fetch only version N (default: the retained history).",
)
@create_option
@other_option
def pull(
    lake: str,
    db: str,
    as_name: str | None,
    version: int | None,
    create: bool,
    other_options: tuple[str, ...],
) -> None:
    """Copy DB from the lake LAKE into this one, fetching only the blocks missing here."""
    dst = connection(create=create)
    with _other_lake(lake, False, other_options) as src:
        _progress_sync(src, dst, db, as_name, version)


@click.command("export")
@click.argument("db")
@click.argument("file", type=click.Path(dir_okay=False, writable=True))
@click.option(
    "--version",
    type=click.IntRange(min=0),
    default=None,
    help="Export version N (default: the head).",
)
def export(db: str, file: str, version: int | None) -> None:
    """Write a version of DB to FILE as a CAR v1 archive (root: the database root).

    FILE "-" (or /dev/stdout) writes the archive to standard output, and the
    summary line to standard error.
    """
    to_stdout = file == "-" or file in _STDOUT_PATHS
    out: Any = sys.stdout.buffer if file == "-" else file
    report = _transfer().export_car(connection(), db, out, version=version)
    size = f"{report.blocks:,} blocks, {report.bytes:,} bytes"
    line = (
        f"exported {db!r} to {'standard output' if to_stdout else file}: {size}, root {report.root}"
    )
    if to_stdout:
        click.echo(line, err=True)  # standard output holds the archive
    else:
        say(line)


#: Names of standard output: a summary printed there would follow the archive's bytes.
_STDOUT_PATHS = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--db", "db", required=True, help="Name of the database to create.")
@commit_options
@create_option
def import_(file: str, db: str, message: str | None, author: str | None, create: bool) -> None:
    """Create database DB from the CAR v1 archive FILE (every block verified first)."""
    if file == "-":  # export writes "-" to stdout, but an import cannot read stdin so
        raise CliError(
            "cannot import from standard input ('-'): an import reads its archive twice "
            "(to check, then to store), so save it to a file first"
        )
    made = _transfer().import_car(
        connection(create=create), file, db, message=message, author=author
    )
    say(f"imported {file} as database {db!r} (version {made.version}, root {made.root})")


COMMANDS: list[click.Command] = [diff, merge, tag, push, pull, export, import_]


def _transfer() -> Any:
    """:mod:`merkle.transfer` (CAR files pull in multiformats: imported when used)."""
    import merkle.transfer

    return merkle.transfer
