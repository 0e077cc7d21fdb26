"""The options of the ``merkle`` data source, parsed once and checked with clear errors.

Spark hands a data source its options as case-insensitive strings. Every
option below is merkle-db's own; any other option is a store option for
:func:`merkle.connect` (for S3: ``endpoint_url``, ``region_name``,
credentials, timeouts), so a misspelt option is refused by the store with
the list of valid ones. doc/spark.md lists them all.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from merkle.errors import UsageError
from merkle.refs.timing import Timing
from merkle.refs.writer import DEFAULT_WRITER_TTL
from merkle.tablets.keys import KeyCodec
from merkle.tablets.keytext import key_from_text

__all__ = [
    "DEFAULT_LEASE_TTL",
    "DEFAULT_PARTITION_BYTES",
    "DRIVER_LEASE_TTL",
    "MIN_PARTITION_BYTES",
    "OWN_OPTIONS",
    "LakeRef",
    "ReadOptions",
    "WriteOptions",
    "lake_ref",
    "lease_ttl_seconds",
    "parse_key",
    "read_options",
    "write_options",
]

#: Bytes of tablets one read partition holds at most (Spark's maxPartitionBytes).
DEFAULT_PARTITION_BYTES = 128 << 20
#: A partition is not made smaller than this to spread a small table (Spark's openCostInBytes).
MIN_PARTITION_BYTES = 4 << 20
#: Seconds a read's or write's lease lives without a running task renewing it.
DEFAULT_LEASE_TTL = 900.0
#: Seconds the writer lease of ``merkle.spark.write`` and ``delete`` lives without being
#: renewed: an ordinary writer's (its driver renews it while the job runs, so a killed
#: driver holds a garbage collection up about as long as a killed writer does).
DRIVER_LEASE_TTL = DEFAULT_WRITER_TTL

OWN_OPTIONS = frozenset(
    {
        "lake",
        "db",
        "table",
        "version",
        "at",
        "tag",
        "key",
        "key_codec",
        "message",
        "author",
        "fields",
        "mixed",
        "from_pk",
        "to_pk",
        "partition_bytes",
        "min_partitions",
        "lease_ttl",
        "lease_holder",
        "cache_bytes",
        "path",
    }
)
_NUMBERS = {
    "bulk_workers": int,
    "max_attempts": int,
    "retry_base_delay": float,
    "connect_timeout": float,
    "read_timeout": float,
}
_FLAGS = {"fsync"}
MIXED = ("variant", "cbor")


@dataclass(frozen=True)
class LakeRef:
    """A lake location and the store options to open it with: plain strings and numbers."""

    uri: str
    options: tuple[tuple[str, Any], ...] = ()
    cache_bytes: int = 256 << 20

    def kwargs(self) -> dict[str, Any]:
        return dict(self.options)


def _need(options: Mapping[str, str], name: str) -> str:
    value = options.get(name)
    if value is None or not str(value).strip():
        raise UsageError(
            f"the merkle data source needs the option {name!r} "
            f'(e.g. .option("{name}", ...)); see doc/spark.md'
        )
    return str(value)


def _number(name: str, text: str, kind: type, least: float) -> Any:
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise UsageError(f"option {name!r} must be a number, got {text!r}") from None
    if value < least:
        raise UsageError(f"option {name!r} must be at least {least}, got {text!r}")
    return value


def lease_ttl_seconds(value: object, given_as: str) -> float:
    """``value`` (a number, or its text) as a lease ttl in seconds; UsageError unless it is
    above the skew margin, the minimum every lease has (:meth:`Timing.check_ttl`): its
    holder counts a lease valid for its ttl less the margin, and renews it every quarter
    of that. This checks the ttl before a lease is taken, with the same words.

    ``given_as``: ``"option"`` (the data source's ``lease_ttl`` option) or ``"argument"``
    (the ``lease_ttl=`` of :func:`merkle.spark.write` and ``delete``).
    """
    number = value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # else refused below, named as given
            number = float(value)
    what = "Spark job's lease (option 'lease_ttl')"
    if given_as == "argument":
        what = "Spark job's writer lease (lease_ttl=)"
    return Timing().check_ttl(number, what)


def lake_ref(uri: str, options: Mapping[str, Any]) -> LakeRef:
    """The lake at ``uri`` with the store options among ``options`` (strings converted)."""
    store: dict[str, Any] = {}
    cache_bytes = 256 << 20
    for name, value in options.items():
        key = name.lower()
        if key in OWN_OPTIONS:
            if key == "cache_bytes":
                cache_bytes = _number(key, str(value), int, 1 << 20)
            continue
        if key in _NUMBERS and isinstance(value, str):
            value = _number(key, value, _NUMBERS[key], 0)
        elif key in _FLAGS and isinstance(value, str):
            value = value.strip().lower() in ("1", "true", "yes")
        store[key] = value
    return LakeRef(str(uri), tuple(sorted(store.items())), cache_bytes)


@dataclass(frozen=True)
class ReadOptions:
    lake: LakeRef
    db: str
    table: str
    version: int | None
    at: datetime.datetime | None
    fields: tuple[str, ...] | None
    tag: str | None
    mixed: str
    from_pk: str | None
    to_pk: str | None
    partition_bytes: int
    min_partitions: int
    lease_ttl: float
    #: Names the holder of the read's reader leases (None: the planning process, host:pid),
    #: so that :func:`merkle.spark.release_reads` can give them up once the reading is done.
    lease_holder: str | None = None


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """The read options, checked (UsageError naming the option at fault)."""
    uri = options.get("lake") or options.get("path")
    if not uri:
        _need(options, "lake")
    version = options.get("version")
    at_text = options.get("at")
    tag = options.get("tag")
    given = [name for name, value in (("version", version), ("at", at_text), ("tag", tag)) if value]
    if len(given) > 1:
        raise UsageError(
            f"pass one of the options 'version', 'at' and 'tag', not {' and '.join(given)}"
        )
    if tag is not None and not str(tag).strip():
        raise UsageError("option 'tag' must name a tag of the database (see conn.tags(db))")
    at = None
    if at_text is not None:
        try:
            at = datetime.datetime.fromisoformat(str(at_text))
        except ValueError:
            raise UsageError(
                f"option 'at' must be an ISO time such as 2026-01-31T12:00:00Z, got {at_text!r}"
            ) from None
    fields = None
    if options.get("fields") is not None:
        fields = tuple(f.strip() for f in str(options["fields"]).split(",") if f.strip())
        repeated = sorted({name for name in fields if fields.count(name) > 1})
        if repeated:  # Spark would fail deep in the JVM on a schema naming a column twice
            raise UsageError(
                f"option 'fields' names {repeated[0]!r} more than once ({options['fields']!r}): "
                "name each field once"
            )
    mixed = str(options.get("mixed", "variant")).lower()
    if mixed not in MIXED:
        raise UsageError(f"option 'mixed' must be one of {MIXED}, got {mixed!r}")
    return ReadOptions(
        lake=lake_ref(str(uri), options),
        db=_need(options, "db"),
        table=_need(options, "table"),
        version=None if version is None else _number("version", str(version), int, 0),
        at=at,
        fields=fields,
        tag=None if tag is None else str(tag),
        mixed=mixed,
        from_pk=options.get("from_pk"),
        to_pk=options.get("to_pk"),
        partition_bytes=_number(
            "partition_bytes", str(options.get("partition_bytes", DEFAULT_PARTITION_BYTES)), int, 1
        ),
        min_partitions=_number(
            "min_partitions", str(options.get("min_partitions", os.cpu_count() or 2)), int, 1
        ),
        lease_ttl=lease_ttl_seconds(options.get("lease_ttl", DEFAULT_LEASE_TTL), "option"),
        lease_holder=_holder(options.get("lease_holder")),
    )


def _holder(value: str | None) -> str | None:
    """Option ``lease_holder``, checked: a name a release can be asked for (None: not given)."""
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        raise UsageError(
            "option 'lease_holder' must name the reads (e.g. 'nightly-pipeline'), got an "
            "empty string; leave it out to have no name"
        )
    return text


@dataclass(frozen=True)
class WriteOptions:
    lake: LakeRef
    db: str
    table: str
    key: str | None
    key_codec: str | None
    message: str | None
    author: str | None
    lease_ttl: float


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """The write options, checked."""
    uri = options.get("lake") or options.get("path")
    if not uri:
        _need(options, "lake")
    return WriteOptions(
        lake=lake_ref(str(uri), options),
        db=_need(options, "db"),
        table=_need(options, "table"),
        key=options.get("key"),
        key_codec=options.get("key_codec"),
        message=options.get("message"),
        author=options.get("author"),
        lease_ttl=lease_ttl_seconds(options.get("lease_ttl", DEFAULT_LEASE_TTL), "option"),
    )


def parse_key(codec: KeyCodec, text: str, option: str) -> Any:
    """The key (or, of a composite key, key prefix) option text stands for under ``codec``.

    The text is read as the ``merkle`` command line reads keys (doc/cli.md,
    "Keys on the command line"): a number, a string, hex bytes, an ISO time,
    a JSON list for a tuple key (fewer items than components: a prefix, a
    scan bound as in ``db.scan``), and for ``reverse(S)`` what ``S`` takes.
    Spark and the command line so take the same key text.
    """
    try:
        return key_from_text(text, codec.spec, prefix=True)
    except UsageError as exc:
        raise UsageError(
            f"option {option!r}: {exc} (key syntax: doc/cli.md, Keys on the command line)"
        ) from None
