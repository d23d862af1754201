"""Exponential backoff with jitter, as Armory's ``clouddriver.backoff`` describes it.

A plain, synchronous object: ``next_delay()`` gives the next wait in seconds and ``reset()``
starts over after a success. The caller sleeps (``await trio.sleep(delay)``) so that the wait
is a cancellable checkpoint in the caller's own scope.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

#: One generator for every Backoff (and the reflectors' watch timeouts): a random.Random is
#: ~2.5 KB of state, and an agent of 1,000 accounts makes three backoffs per watch, 12,000
#: watches: ~90 MB of generators for spreading delays. The jitter needs no independence.
SHARED_RANDOM = random.Random()


@dataclass(slots=True)
class Backoff:
    """Delays of ``base * multiplier**n``, capped at ``max_delay``, each spread by ``±jitter``.

    ``jitter`` is a fraction (0.2 means ±20 %), so that many agents reconnecting after the same
    outage do not arrive at the same instant.
    """

    base: float = 1.0
    multiplier: float = 1.6
    jitter: float = 0.2
    max_delay: float = 120.0
    _attempt: int = 0
    #: Once the cap is reached the exponent stops growing: ``1.6**1511`` overflows a float
    #: (OverflowError), ~25 h into an outage at a 60 s cap.
    _capped: bool = False
    _random: random.Random = field(default=SHARED_RANDOM)

    def __post_init__(self) -> None:
        if self.base <= 0 or self.multiplier < 1 or not 0 <= self.jitter <= 1:
            raise ValueError(
                f"backoff needs base > 0, multiplier >= 1 and 0 <= jitter <= 1, got "
                f"base={self.base}, multiplier={self.multiplier}, jitter={self.jitter}"
            )

    def next_delay(self, *, at_least: float = 0.0) -> float:
        """The next delay in seconds; ``at_least`` honours a server's Retry-After, up to
        ``max_delay``."""
        if self._capped:
            raw = self.max_delay
        else:
            raw = min(self.max_delay, self.base * self.multiplier**self._attempt)
            self._capped = raw >= self.max_delay
        self._attempt += 1
        spread = raw * self.jitter
        delay = raw + self._random.uniform(-spread, spread)
        # A server's hint past the cap is clamped to it, as client-go does: one 429 asking
        # for a day must not park a reflector for a day.
        return max(min(at_least, self.max_delay), min(self.max_delay, max(0.0, delay)))

    def reset(self) -> None:
        """Start over: call after a success."""
        self._attempt = 0
        self._capped = False

    @property
    def attempts(self) -> int:
        return self._attempt
