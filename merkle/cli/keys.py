"""Primary keys typed on the command line, parsed by the table's key codec.

The syntax (``doc/cli.md``, "Keys") and the parser live in
:mod:`merkle.tablets.keytext`, which Spark's ``from_pk``/``to_pk`` options
share; here a key that does not parse is a
:class:`~merkle.cli.common.CliError` naming the key and the codec.
"""

from __future__ import annotations

from typing import Any

from merkle.cli.common import CliError
from merkle.errors import UsageError
from merkle.tablets.keytext import key_from_text, split_spec

__all__ = ["parse_key", "parse_keys", "split_spec"]


def parse_key(text: str, spec: str | None, *, prefix: bool = False) -> Any:
    """The key value ``text`` stands for under codec ``spec`` (see :func:`key_from_text`)."""
    try:
        return key_from_text(text, spec, prefix=prefix)
    except UsageError as exc:
        raise CliError(str(exc)) from None


def parse_keys(texts: list[str] | tuple[str, ...], spec: str | None) -> list[Any]:
    """:func:`parse_key` of each text, in order."""
    return [parse_key(text, spec) for text in texts]
