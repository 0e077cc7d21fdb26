"""``merkle compact``: fold pending batches into tablets, as one commit."""

from __future__ import annotations

import click

from merkle.cli.common import commit_options, open_db, say

__all__ = ["compact"]


@click.command(short_help="Fold pending batches into tablets (one commit).")
@click.argument("db")
@click.argument("table", required=False)
@commit_options
def compact(db: str, table: str | None, message: str | None, author: str | None) -> None:
    """Fold the pending batches of TABLE (default: every table) of DB into its tablets.

    Reads give the same records before and after; afterwards every record is
    in a tablet, which bulk readers (`list_tablets`, Spark) see directly.
    """
    what = f"table {table}" if table is not None else "all tables"
    before = open_db(db)
    compacted = before.compact(table)
    if not compacted.dirty:
        say(f"nothing to compact in {db} ({what}): no pending batches")
        return
    done = compacted.commit(message=message or f"compact {what}", author=author)
    say(f"compacted {what} of database {db!r} (version {done.version})")
