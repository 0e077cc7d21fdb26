"""``merkle db``: list, create, drop, clone, describe, trim and show the history of databases."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from merkle.cli.common import (
    CliError,
    MerkleGroup,
    commit_options,
    connection,
    json_option,
    open_db,
    say,
    version_options,
)
from merkle.cli.output import emit_record, emit_rows, format_option
from merkle.errors import IntegrityError, NotFoundError
from merkle.refs.entry import journal_prefix, parse_entry_key
from merkle.refs.names import check_db_name

__all__ = ["db"]


@click.group(cls=MerkleGroup)
def db() -> None:
    """Databases: list, create, drop, clone, describe, log, trim."""


@db.command("list")
@format_option
def list_dbs(fmt: str | None) -> None:
    """The live databases: name, head version and when it was committed.

    A database whose journal is damaged (its head entry does not decode, say) is
    listed without a version and time, the others as usual; the damage is then
    said on stderr (exit status 1), so one database does not hide the rest.
    """
    conn = connection()
    rows: list[dict[str, Any]] = []
    damaged: list[tuple[str, IntegrityError]] = []
    for name in conn.list_dbs():
        try:
            head = conn.history(name, limit=1)[0]
        except IntegrityError as exc:
            damaged.append((name, exc))
            rows.append({"name": name, "version": None, "time": None})
            continue
        rows.append({"name": name, "version": head.version, "time": head.time})
    emit_rows(rows, fmt, columns=["name", "version", "time"])
    if damaged:
        names = ", ".join(repr(name) for name, _ in damaged)
        raise IntegrityError(
            f"database(s) {names}, listed without a version, cannot be read: {damaged[0][1]}"
        )


@db.command("create")
@click.argument("name")
@json_option("--metadata", 'Metadata of the database, as JSON: \'{"owner": "ops"}\'.')
@commit_options
def create(name: str, metadata: Any, message: str | None, author: str | None) -> None:
    """Create an empty database NAME (committed at once, as version 0)."""
    created = connection(create=True).create_db(
        name, metadata=metadata, message=message or f"create database {name}", author=author
    )
    say(f"created database {name!r} (version {created.version})")


@db.command("drop")
@click.argument("name")
@commit_options
def drop(name: str, message: str | None, author: str | None) -> None:
    """Drop database NAME. Its history and blocks stay until `merkle gc`."""
    entry = connection().drop_db(name, message=message or f"drop database {name}", author=author)
    say(f"dropped database {name!r} at version {entry.version}; its data stays until `merkle gc`")


@db.command("clone")
@click.argument("source")
@click.argument("target")
@version_options
@commit_options
def clone(
    source: str,
    target: str,
    version: int | None,
    at: datetime | None,
    message: str | None,
    author: str | None,
) -> None:
    """Create TARGET as a copy-on-write clone of SOURCE (its head, or --version N): O(1)."""
    src = open_db(source, version, at)
    made = connection().create_db(
        target,
        root=src,
        message=message or f"clone {source} version {src.version}",
        author=author,
    )
    say(f"cloned database {source!r} version {src.version} as {target!r} (version {made.version})")


@db.command("describe")
@click.argument("name")
@version_options
@format_option
def describe(name: str, version: int | None, at: datetime | None, fmt: str | None) -> None:
    """Database NAME: its root, version, tables (records and bytes), metadata."""
    emit_record(open_db(name, version, at).describe(), fmt)


@db.command("log")
@click.argument("name")
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Show at most N versions.",
)
@click.option(
    "--no-counts",
    is_flag=True,
    help="Do not count the records each version changed (they cost a diff per version).",
)
@format_option
def log(name: str, limit: int | None, no_counts: bool, fmt: str | None) -> None:
    """The committed versions of database NAME, newest first (drops show an empty root).

    ``changes`` counts the records each version inserted (+), updated (~)
    and deleted (-), against its parent; a merge shows both parents.
    """
    from merkle.db.diff import commit_counts  # the diff code: only this command uses it

    conn = connection()
    entries = conn.history(name, limit)

    def changes(entry: Any) -> str | None:
        counts = None if no_counts else commit_counts(conn, entry)
        if counts is None:
            return None
        return f"+{counts.inserted} ~{counts.updated} -{counts.deleted}"

    rows = (
        {
            "version": entry.version,
            "time": entry.time,
            "author": entry.author,
            "message": entry.message,
            "changes": changes(entry),
            "root": entry.root,
            "forked_from": entry.forked_from,
            "merged_from": entry.merged_from,
        }
        for entry in entries
    )
    emit_rows(
        rows,
        fmt,
        columns=[
            "version",
            "time",
            "author",
            "message",
            "changes",
            "root",
            "forked_from",
            "merged_from",
        ],
    )


@db.command("trim")
@click.argument("name")
@click.option(
    "--below",
    type=click.IntRange(min=1),
    required=True,
    metavar="N",
    help="Remove the journal entries of the versions below N (N itself is kept).",
)
def trim(name: str, below: int) -> None:
    """Give up the versions of database NAME below N: their journal entries are removed.

    ``conn.refs.trim`` for operators: the way out of a damaged journal entry
    (or a gap) below the head, and the last step of giving up a damaged head
    after `merkle db drop` (doc/operations.md, "Damaged lake objects"). The
    head is never removed: an N above it is refused. `merkle gc` then frees
    the blocks only the removed versions used.
    """
    name = check_db_name(name)
    conn = connection()
    top = _newest_slot(conn, name)
    if top is None:
        raise NotFoundError(f"database {name!r} does not exist")
    if below > top:
        fewer = f"give --below {top} or less" if top else "it has no version below its head"
        raise CliError(
            f"--below {below} would remove the head of database {name!r} (version {top}), "
            f"which trimming never removes: {fewer}; to give up a damaged head, "
            f'`merkle db drop {name}` first (doc/operations.md, "Damaged lake objects")'
        )
    try:
        floor = conn.refs.floor(name)
    except IntegrityError:
        floor = 0  # a damaged retention marker: trimming writes it again
    removed = conn.refs.trim(name, below)
    if not removed:
        say(f"nothing to trim: database {name!r} keeps no version below {max(floor, below)}")
        return
    first = below - removed
    listed = f"version {first}" if removed == 1 else f"versions {first} to {below - 1}"
    say(
        f"trimmed database {name!r}: removed {listed}; it keeps versions {below} to {top}. "
        "`merkle gc` frees the blocks only the removed versions used"
    )


def _newest_slot(conn: Any, name: str) -> int | None:
    """The highest version the journal of ``name`` lists (None: no entry), undecoded.

    Read from the listing, not the head entry, so a damaged head still counts as
    the head (``trim`` never removes it).
    """
    listed = (parse_entry_key(name, info.key) for info in conn.store.list(journal_prefix(name)))
    return max((v for v in listed if v is not None), default=None)
