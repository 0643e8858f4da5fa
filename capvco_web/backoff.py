"""The one backoff: how long to wait before trying again, for every caller that retries.

Each caller keeps its own numbers (the whitesky client's retries, a task's retry, a failed
machine, a Kubernetes watch that broke): the base, doubled per retry, up to the cap; with a
random source, "equal jitter" (at least half the wait, so retries never bunch up at zero).
No Django in it: the whitesky client uses it too.
"""

from __future__ import annotations

import math
import random

# 2.0 ** 1024 overflows a float; no cap is reached later than this.
_MOST_DOUBLINGS = 1000


def backoff_seconds(
    retry: int, *, base: float, cap: float = math.inf, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number `retry` (0: the first retry)."""
    ceiling = min(cap, base * 2.0 ** min(max(retry, 0), _MOST_DOUBLINGS))
    if rng is None:
        return ceiling
    return ceiling / 2 + rng.uniform(0, ceiling / 2)
