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
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from merkle.errors import UsageError

__all__ = ["DEFAULT_POLL_INTERVAL", "DEFAULT_SKEW_MARGIN", "Timing"]

#: Seconds of clock disagreement tolerated by default. NTP keeps servers far
#: closer; writers do not depend on it for safety (a collector that goes on
#: without them fences them off, see merkle.refs.writer), so it only decides
#: how long a lease or lock of a vanished process keeps others waiting.
DEFAULT_SKEW_MARGIN = 5.0
#: Seconds between looks at the store while waiting for a lock or for writers.
DEFAULT_POLL_INTERVAL = 0.5


@dataclass(frozen=True)
class Timing:
    """A clock, a way to wait, and the skew margin: everything expiry depends on."""

    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    margin: float = DEFAULT_SKEW_MARGIN
    poll_interval: float = DEFAULT_POLL_INTERVAL

    def __post_init__(self) -> None:
        if not _finite(self.margin) or self.margin < 0:
            raise UsageError(f"skew_margin must be a finite number >= 0, got {self.margin!r}")
        if not _finite(self.poll_interval) or self.poll_interval <= 0:
            raise UsageError(f"poll_interval must be a number > 0, got {self.poll_interval!r}")

    def now(self) -> float:
        """Seconds since the epoch by this process's clock."""
        return float(self.clock())

    def holder_valid(self, expires: float) -> bool:
        """Whether the holder of something expiring at ``expires`` may still rely on it."""
        return self.now() < expires - self.margin

    def observer_live(self, expires: float) -> bool:
        """Whether others must still respect something expiring at ``expires``."""
        return self.now() < expires + self.margin

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
