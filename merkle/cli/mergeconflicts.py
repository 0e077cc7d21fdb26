"""What ``merkle merge`` says when a merge conflicts, in one line with the advice that fits.

:class:`~merkle.errors.MergeConflictError` says what it holds: key conflicts
(``conflicts``), table conflicts (``table_conflicts``), which of those are of
settings only (``settings_conflicts``) and whether ``--resolve`` cannot settle
it at all (``needs_base``: a criss-cross whose merge bases cannot be merged
into one). The line names what ``--resolve ours`` and ``--resolve theirs``
would take for each conflict found, or asks for ``--base N`` when only a
chosen base can settle it; it never offers advice that cannot work.
"""

from __future__ import annotations

from merkle.cli.advice import for_cli
from merkle.errors import MergeConflictError

__all__ = ["conflict_line"]


def _label(table: str) -> str:
    """A table as the line names it (``""`` is the database metadata)."""
    return table or "database metadata"


def _found(exc: MergeConflictError) -> str:
    """What conflicted, per table: ``t: 3 keys; u: its metadata changed on both sides``."""
    parts = [f"{name}: {len(rows)} keys" for name, rows in exc.conflicts.items()]  # type: ignore[arg-type]
    parts += [f"{_label(name)}: {why}" for name, why in exc.table_conflicts.items()]
    return "; ".join(parts)


def _taken(exc: MergeConflictError) -> str:
    """What either ``--resolve`` takes of each conflict found, kind by kind."""
    settings = exc.settings_conflicts
    whole = sorted(name for name in exc.table_conflicts if name not in settings)
    parts = []
    if exc.conflicts:
        parts.append(
            f"of {', '.join(exc.conflicts)}, each takes that side's record of each conflicting key"
        )
    if whole:
        parts.append(
            f"of {', '.join(whole)}, each takes that side's whole table (the other side's "
            "changes to it are dropped: to keep both, make the table agree on both sides "
            "first and merge again)"
        )
    tables = sorted(name for name in settings if name)
    if tables:
        parts.append(
            f"of {', '.join(tables)}, each takes that side's metadata or families only (the "
            "rows still merge key by key)"
        )
    if "" in settings:
        parts.append("of the database metadata, each takes that side's metadata")
    return "; ".join(parts)


def _base_advice(exc: MergeConflictError, source: str, into: str) -> str:
    """The library's criss-cross message restated with ``--base N`` (a version of INTO),
    naming the versions of INTO among the merge bases."""
    said = for_cli(str(exc)).replace("the database merged into", repr(into))
    text = f"merge of {source!r} into {into!r} committed nothing: {said}"
    ours = sorted(version for db, version in exc.merge_bases if db == into)
    if ours:
        named = " or ".join(f"--base {version}" for version in ours)
        text += f"; {named} merges from that version of {into!r}, one of those bases"
    return text


def conflict_line(exc: MergeConflictError, source: str, into: str) -> str:
    """The one-line error of ``merkle merge SOURCE INTO`` for ``exc``."""
    if exc.needs_base:
        return _base_advice(exc, source, into)
    return (
        f"merge of {source!r} into {into!r} has conflicts ({_found(exc)}); nothing was "
        f"committed: pass --resolve ours to keep what {into!r} has or --resolve theirs to "
        f"take what {source!r} has: {_taken(exc)}"
    )
