"""How often to try a call that is safe to repeat, and how long to wait between tries.

tenacity runs the tries (`Transport._call`, transport.py); this policy is its stop and its wait.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from capvco_web.backoff import backoff_seconds


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, honouring the server's Retry-After up to a cap.

    `attempts` counts the first try: 1 means never retry.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")

    def delay(self, retry: int, *, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry number `retry` (0 for the first retry)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_retry_after)
        return backoff_seconds(retry, base=self.base_delay, cap=self.max_delay, rng=rng)
