"""Retention: which versions of each database garbage collection keeps.

A lake has one retention policy, stored at ``gc/policy``: a default for
every database plus per-database overrides. A retention keeps the newest
``keep_versions`` entries of a journal and every entry committed within
``keep_within`` of now, plus the entry that was current when that window
began (so ``open_db(at=now - keep_within)`` still works); the union when both
are set, and always the head;
with neither set it keeps every version. ``grace`` is how old an unreachable
block must be before it may be deleted.

Durations longer than :data:`MAX_DURATION` (100 years) are refused when
given (``UsageError``); one stored by an older merkle-db that accepted them
is clamped to it when read, which keeps the same versions (none is older)
and lets GC run instead of overflowing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from merkle.blocks.codec import (
    NODE_VERSION,
    check_node,
    decode_node,
    encode_node,
    is_newer_format,
)
from merkle.errors import IntegrityError, NotFoundError, UsageError
from merkle.refs import check_db_name
from merkle.storage.base import ObjectStore

__all__ = [
    "DEFAULT_GRACE",
    "MAX_DURATION",
    "POLICY_KEY",
    "Policy",
    "PolicyDamagedError",
    "Retention",
    "load_policy",
    "parse_duration",
    "save_policy",
]

POLICY_KEY = "gc/policy"
POLICY_TYPE = "merkle/gc-policy"

#: Unreachable blocks younger than this are never deleted (a safety net for
#: writers without leases and for clock trouble; leases do the real work).
DEFAULT_GRACE = timedelta(hours=1)

_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
#: A number and the letters after it; which letters are a unit is decided below.
_PART = re.compile(r"(\d+(?:\.\d+)?)([a-zA-Z]*)")
_FORMAT = "use a number and a unit (w, d, h, m, s), e.g. 7d, 1h30m, 45s"
#: The longest duration accepted: 36500 days (100 years). Longer ones meant
#: "forever" and would overflow the dates GC computes (``now - keep_within``);
#: keeping every version is the default, and a grace this long never deletes.
MAX_DURATION = timedelta(days=36500)


def parse_duration(text: str | timedelta, what: str = "a duration") -> timedelta:
    """``"7d"``, ``"1h30m"``, ``"45s"``, ``"2w"`` (or a timedelta) as a timedelta.

    ``what`` names the option in errors (``"grace"``, ``"keep_within"``). Units are
    ``w``, ``d``, ``h``, ``m``, ``s``, lower case only, each at most once: ``6M``
    (months? minutes?) and ``7D`` are refused, as is ``1h1h`` (a typo, not 2h). A
    duration longer than :data:`MAX_DURATION` is a UsageError saying so.
    """
    if isinstance(text, timedelta):
        if text < timedelta(0):
            raise UsageError(f"{what} cannot be a negative duration, got {text}")
        return _check_range(text.total_seconds(), text, what)
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"{what} must be a duration, text like '7d' or '1h30m', got {text!r}")
    spec = text.strip()
    pos, seconds, seen = 0, 0.0, set()
    for match in _PART.finditer(spec):
        if match.start() != pos:
            break
        number, unit = match.groups()
        if unit not in _UNITS:
            raise UsageError(_bad_unit(text, what, number, unit))
        if unit in seen:
            raise UsageError(
                f"bad duration {text!r} for {_named(what)}: it gives the unit {unit!r} more "
                "than once; give each unit once, largest first (e.g. 2h, 1h30m, 7d12h)"
            )
        seen.add(unit)
        seconds += float(number) * _UNITS[unit]
        pos = match.end()
    if pos != len(spec) or pos == 0:
        raise UsageError(f"bad duration {text!r} for {_named(what)}: {_FORMAT}")
    return _check_range(seconds, text, what)


def _named(what: str) -> str:
    """An option as errors name it: ``keep_within (--keep-within)`` for the API's and
    the command line's options alike."""
    return f"{what} (--{what.replace('_', '-')})" if what in ("grace", "keep_within") else what


def _bad_unit(text: str, what: str, number: str, unit: str) -> str:
    """Why ``unit`` (after ``number``) is no unit of a duration, and what to write."""
    head = f"bad duration {text!r} for {_named(what)}"
    if unit == "M":
        return (
            f"{head}: 'M' is not a unit (months? minutes?): write {number}m for minutes; "
            f"months are not a unit, write days (e.g. 180d for six months)"
        )
    if unit.lower() in _UNITS:
        return f"{head}: units are lower case: write {number}{unit.lower()}, not {number}{unit}"
    if not unit:
        return f"{head}: {number} has no unit; {_FORMAT}"
    return f"{head}: {unit!r} is not a unit; {_FORMAT}"


def _check_range(seconds: float, given: object, what: str) -> timedelta:
    if not seconds <= MAX_DURATION.total_seconds():  # also refuses inf and nan
        advice = "; leave keep_within unset to keep every version" if what == "keep_within" else ""
        raise UsageError(
            f"{_named(what)} is too long: {given!s} is more than the largest accepted, "
            f"{MAX_DURATION.days}d (100 years){advice}"
        )
    return timedelta(seconds=seconds)


def _clamped(seconds: float) -> timedelta:
    """A stored duration, clamped to :data:`MAX_DURATION` (see :meth:`Policy.from_node`)."""
    return timedelta(seconds=min(seconds, MAX_DURATION.total_seconds()))


def _check_keep_versions(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(
            f"keep_versions must be an integer >= 1 (the head is always kept), got {value!r}"
        )
    return value


@dataclass(frozen=True)
class Retention:
    """How many and how recent versions of one database to keep (None: no limit of that kind)."""

    keep_versions: int | None = None
    keep_within: timedelta | None = None

    def __post_init__(self) -> None:
        _check_keep_versions(self.keep_versions)
        if self.keep_within is not None:
            parse_duration(self.keep_within, "keep_within")

    @property
    def keeps_everything(self) -> bool:
        return self.keep_versions is None and self.keep_within is None

    def describe(self) -> str:
        if self.keeps_everything:
            return "every version"
        parts = []
        if self.keep_versions is not None:
            parts.append(f"the newest {self.keep_versions}")
        if self.keep_within is not None:
            parts.append(f"those of the last {self.keep_within}")
        return " and ".join(parts) + " (and the head)"

    def to_node(self) -> dict[str, Any]:
        within = self.keep_within.total_seconds() if self.keep_within is not None else None
        return {"keep_versions": self.keep_versions, "keep_within_seconds": within}

    @classmethod
    def from_node(cls, node: Any) -> Retention:
        if not isinstance(node, Mapping):
            raise IntegrityError(f"a retention in {POLICY_KEY!r} is {node!r}, not a map")
        within = node.get("keep_within_seconds")
        versions = node.get("keep_versions")
        if within is not None and (not _number(within) or within < 0):
            raise IntegrityError(f"{POLICY_KEY!r} holds keep_within_seconds {within!r}")
        try:
            return cls(versions, _clamped(within) if within is not None else None)
        except (UsageError, OverflowError) as exc:
            raise IntegrityError(f"{POLICY_KEY!r} holds a bad retention: {exc}") from None


@dataclass(frozen=True)
class Policy:
    """A lake's retention default, its per-database overrides, and the grace period."""

    default: Retention = field(default_factory=Retention)
    databases: dict[str, Retention] = field(default_factory=dict)
    grace: timedelta = DEFAULT_GRACE

    def for_db(self, name: str) -> Retention:
        """The retention of one database (its override, else the default)."""
        return self.databases.get(name, self.default)

    def with_default(self, retention: Retention) -> Policy:
        return replace(self, default=retention)

    def with_database(self, name: str, retention: Retention | None) -> Policy:
        """This policy with ``name``'s override set (None removes it)."""
        check_db_name(name)
        databases = dict(self.databases)
        if retention is None:
            databases.pop(name, None)
        else:
            databases[name] = retention
        return replace(self, databases=databases)

    def to_node(self) -> dict[str, Any]:
        return {
            "type": POLICY_TYPE,
            "v": NODE_VERSION,
            "default": self.default.to_node(),
            "databases": {name: r.to_node() for name, r in sorted(self.databases.items())},
            "grace_seconds": self.grace.total_seconds(),
        }

    @classmethod
    def from_node(cls, node: Any) -> Policy:
        node = check_node(node, POLICY_TYPE, where=POLICY_KEY)
        databases = node.get("databases")
        grace = node.get("grace_seconds")
        if not isinstance(databases, Mapping) or not all(isinstance(n, str) for n in databases):
            raise IntegrityError(f"{POLICY_KEY!r} holds databases {databases!r}, not a map")
        if not _number(grace) or grace < 0:
            raise IntegrityError(f"{POLICY_KEY!r} holds grace_seconds {grace!r}")
        try:
            return cls(
                Retention.from_node(node.get("default")),
                {name: Retention.from_node(r) for name, r in databases.items()},
                _clamped(grace),
            )
        except OverflowError:
            raise IntegrityError(f"{POLICY_KEY!r} holds a duration out of range") from None


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class PolicyDamagedError(IntegrityError):
    """The stored policy (``gc/policy``) is damaged: its bytes do not decode, or do not
    hold a policy. Garbage collection cannot tell which versions to keep, so it stops;
    :func:`merkle.gc.set_retention` replaces such a policy (and only such a one: a
    policy of a newer format is a plain :class:`IntegrityError`, upgrade to read it)."""

    def __init__(self, uri: str, problem: str) -> None:
        super().__init__(
            f"GC policy object {POLICY_KEY!r} in {uri} is damaged: {problem}; garbage "
            "collection cannot tell which versions to keep, so it stops before deleting "
            "anything: store the retention again with set_retention (Python API: from "
            "merkle.gc import set_retention), which replaces the damaged policy (set each "
            "per-database override and the grace period again too), or restore the object "
            "from a backup"
        )


def load_policy(store: ObjectStore) -> Policy:
    """The lake's policy (keep every version, one hour of grace, until one is saved).

    A damaged one is a :class:`PolicyDamagedError` naming it and the way out.
    """
    try:
        data = store.get(POLICY_KEY)
    except NotFoundError:
        return Policy()
    try:
        node = decode_node(data)
    except IntegrityError as exc:
        raise PolicyDamagedError(store.uri, f"it does not decode ({exc})") from None
    if isinstance(node, dict) and node.get("type") == POLICY_TYPE and is_newer_format(node):
        check_node(node, POLICY_TYPE, where=POLICY_KEY)  # a newer format: upgrade, not damage
    try:
        return Policy.from_node(node)
    except IntegrityError as exc:
        raise PolicyDamagedError(store.uri, str(exc)) from None


def save_policy(store: ObjectStore, policy: Policy) -> None:
    store.put(POLICY_KEY, encode_node(policy.to_node()))
