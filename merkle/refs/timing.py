"""Wall-clock expiry with a margin for clock skew, shared by leases and the GC lock.

Leases and the GC lock expire by wall clock, and the machines that write and
read them do not share one. Every expiry time is therefore read in the safe
direction for the one asking:

* the **holder** treats its lease (or lock) as expired ``margin`` seconds
  *before* its ``expires`` time, so it renews or stops in time;
* an **observer** (GC deciding what is protected, a writer deciding whether
  the GC lock is held, a GC breaking an old lock) treats it as live until
  ``margin`` seconds *after* ``expires``.

Between the two views lie ``2 * margin`` seconds, so clocks may disagree by
up to ``2 * margin`` (and a holder may stall for that long between checking
and acting) without a holder and an observer both acting on the same lease.

A holder whose clock runs far *ahead* would otherwise leave objects that look
live for as long as its clock is ahead (a day ahead: a day), long after it
died. So an observer also bounds what it respects by what it has seen itself
(:meth:`Timing.observed_live`): an object it has seen unchanged for longer
than the object's own stated duration (``expires - start``), plus the
margin, is no longer live, whatever its times say. A holder that is alive
renews, which changes the object and starts the count again; with clocks
that agree the bound never ends anything earlier than its expiry (the
observer first sees an object after it was written). Writer leases, which
garbage collection may safely go on without (it fences their writers off),
and a GC lock another collector may safely take over, are in addition
ignored at once when their start lies further in the observer's future than
their stated duration plus :data:`FUTURE_SKEW_ALLOWANCE`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from merkle.errors import UsageError

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_SKEW_MARGIN",
    "FUTURE_SKEW_ALLOWANCE",
    "Sightings",
    "Timing",
]

#: Seconds of clock disagreement tolerated by default. NTP keeps servers far
#: closer; writers do not depend on it for safety (a collector that goes on
#: without them fences them off, see merkle.refs.writer), so it only decides
#: how long a lease or lock of a vanished process keeps others waiting.
DEFAULT_SKEW_MARGIN = 5.0
#: Seconds between looks at the store while waiting for a lock or for writers.
DEFAULT_POLL_INTERVAL = 0.5
#: How far past its own duration the start of a writer lease (or, for a
#: collector, of the GC lock) may lie in an observer's future before the
#: observer takes it for the work of a clock that runs ahead and ignores it.
FUTURE_SKEW_ALLOWANCE = 60.0
#: Sightings remembered before the oldest are forgotten (a forgotten object
#: that is seen again counts from then: later, never earlier).
_MAX_SIGHTINGS = 4096


class Sightings:
    """When this process first saw each lease or lock object as it now stands.

    Keyed by the object's key; an object whose expiry changed (renewed) is a
    new sighting. Safe across threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, float]] = {}  # key -> (expires, first seen)

    def first_seen(self, key: str, expires: float, now: float) -> float:
        """When ``key``, expiring at ``expires``, was first seen (``now`` if just now)."""
        with self._lock:
            known = self._seen.get(key)
            if known is not None and known[0] == expires:
                return known[1]
            if len(self._seen) >= _MAX_SIGHTINGS:
                oldest = sorted(self._seen, key=lambda k: self._seen[k][1])
                for stale in oldest[: _MAX_SIGHTINGS // 2]:
                    del self._seen[stale]
            self._seen[key] = (expires, now)
            return now


@dataclass(frozen=True)
class Timing:
    """A clock, a way to wait, and the skew margin: everything expiry depends on."""

    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    margin: float = DEFAULT_SKEW_MARGIN
    poll_interval: float = DEFAULT_POLL_INTERVAL
    future_allowance: float = FUTURE_SKEW_ALLOWANCE
    sightings: Sightings = field(default_factory=Sightings, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not _finite(self.margin) or self.margin < 0:
            raise UsageError(f"skew_margin must be a finite number >= 0, got {self.margin!r}")
        if not _finite(self.poll_interval) or self.poll_interval <= 0:
            raise UsageError(f"poll_interval must be a number > 0, got {self.poll_interval!r}")
        if not _finite(self.future_allowance) or self.future_allowance < 0:
            raise UsageError(
                f"future_allowance must be a finite number >= 0, got {self.future_allowance!r}"
            )

    def now(self) -> float:
        """Seconds since the epoch by this process's clock."""
        return float(self.clock())

    def holder_valid(self, expires: float) -> bool:
        """Whether the holder of something expiring at ``expires`` may still rely on it."""
        return self.now() < expires - self.margin

    def observer_live(self, expires: float) -> bool:
        """Whether others must still respect something expiring at ``expires``."""
        return self.now() < expires + self.margin

    def observed_live(
        self, key: str, start: float, expires: float, *, distrust_future: bool = False
    ) -> bool:
        """Whether an observer must still respect object ``key`` (see the module doc).

        Live while its expiry plus the margin has not passed *and* this
        observer has not seen it unchanged for longer than its stated
        duration (``expires - start``) plus the margin. ``distrust_future``:
        also not live when its start lies implausibly far in the future
        (:meth:`implausibly_ahead`).
        """
        now = self.now()
        if now >= expires + self.margin:
            return False
        if distrust_future and self.implausibly_ahead(start, expires):
            return False
        first = self.sightings.first_seen(key, expires, now)
        return now < first + max(0.0, expires - start) + self.margin

    def implausibly_ahead(self, start: float, expires: float) -> bool:
        """Whether ``start`` lies further in the future than the duration plus the allowance."""
        return start - self.now() > max(0.0, expires - start) + self.future_allowance

    def skew_note(self, start: float, expires: float) -> str:
        """A sentence on a holder's clock running ahead, or "" if ``start`` is not ahead."""
        ahead = start - self.now()
        if ahead <= self.margin:
            return ""
        return (
            f"its start lies {_span(ahead)} in this machine's future, so its holder's clock "
            f"runs ahead: it counts as live for at most its stated duration "
            f"({_span(max(0.0, expires - start))}) plus the {self.margin:g}s margin after this "
            "process first saw it unchanged"
        )

    def renewal_interval(self, ttl: float, parts: int = 4) -> float:
        """Seconds between renewals of something held for ``ttl`` seconds: a ``parts``-th
        of the time its holder counts it valid (``ttl`` less the margin), so that a
        renewal that comes late, or fails, leaves ``parts - 1`` more before the holder
        loses it. A ``parts``-th of ``ttl`` itself came too late where the margin is most
        of ``ttl``: a lease of 6 s was valid to its holder for 1 s and first renewed after
        1.5 s, when renewing it was refused."""
        return max(0.0, float(ttl) - self.margin) / parts

    def check_ttl(self, ttl: object, what: str) -> float:
        """``ttl`` as float seconds, long enough to be useful to its holder."""
        if not _finite(ttl) or float(ttl) <= self.margin:  # type: ignore[arg-type]
            raise UsageError(
                f"the ttl of a {what} must be a number of seconds above the skew margin "
                f"({self.margin:g}s), got {ttl!r}: the holder treats it as expired "
                "that much early"
            )
        return float(ttl)  # type: ignore[arg-type]

    def check_timeout(self, timeout: object, what: str) -> float:
        """``timeout`` as float seconds >= 0."""
        if not _finite(timeout) or float(timeout) < 0:  # type: ignore[arg-type]
            raise UsageError(f"{what} must be a number of seconds >= 0, got {timeout!r}")
        return float(timeout)  # type: ignore[arg-type]

    def describe(self, when: float) -> str:
        """``when`` (epoch seconds) for people: UTC time and its distance from now."""
        try:
            stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        except (OverflowError, OSError, ValueError):
            stamp = f"{when:.0f} (epoch seconds)"
        delta = when - self.now()
        if abs(delta) < 0.5:
            return f"{stamp} (now)"
        return (
            f"{stamp} ({_span(delta)} from now)" if delta > 0 else f"{stamp} ({_span(-delta)} ago)"
        )

    def pause(self, deadline: float, wake_by: float | None = None) -> None:
        """Wait one poll interval, but not past ``deadline`` or ``wake_by``."""
        until = deadline if wake_by is None else min(deadline, wake_by)
        self.sleep(max(0.0, min(self.poll_interval, until - self.now())))


def _span(seconds: float) -> str:
    """A duration in the largest fitting unit: ``45 s``, ``12 min``, ``3.5 h``, ``2.0 d``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
