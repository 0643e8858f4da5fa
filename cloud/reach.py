"""Whether each account's whitesky answers, as its calls find it, and the readiness check
that says so (`whitesky` on /readyz and the overview's system panel).

Every call's outcome (the client's `on_answer`, web and workers alike) is counted and
stamped in the shared counters' store (capvco_web.counters: no database query): the time
of the account's last answer, or of its last failure (no answer at all, or a 5xx) with
the operation. An account is unreachable when its last answer is older than two observe
intervals and calls failed since: its locations are then not observed, and machines
mid-step wait. Readiness names the account, the host its calls go to and its locations,
so that a whitesky outage shows as itself, not as the workers that wait out its timeouts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis
from django.conf import settings

from capvco_web.counters import counters, stamp, whitesky_call_count
from cloud.models import Account

REACH = "whitesky_reach"
SHOWN = 5  # accounts named in the check's detail; the rest are counted


def whitesky_call_seen(account: int, operation: str, status: str) -> None:
    """One call's outcome: `status` is the HTTP status, or "error" when no answer came."""
    whitesky_call_count(account, operation, status)
    if status == "error" or status.startswith("5"):
        stamp(REACH, f"{account}:failed", f"{time.time():.3f} {operation} {status}")
    else:
        stamp(REACH, f"{account}:answered", f"{time.time():.3f}")


@dataclass(frozen=True)
class Unreachable:
    account_id: int
    since: float | None
    """When it last answered (None: never)."""
    operation: str
    status: str

    def said(self, account: Account, now: float) -> str:
        parts = urlsplit(account.api_url)
        host = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        locations = ", ".join(account.locations.order_by("name").values_list("name", flat=True))
        how = "no answer" if self.status == "error" else f"HTTP {self.status}"
        last = "never answered" if self.since is None else f"no answer for {now - self.since:.0f}s"
        where = f" (locations {locations})" if locations else ""
        return f"{account.name} at {host}{where}: {last} (last call {self.operation}: {how})"


def unreachable(stamps: dict[str, str], *, now: float, grace: float) -> list[Unreachable]:
    """The accounts whose calls failed since their last answer, `grace` seconds ago or
    more (or that never answered)."""
    found = []
    for key, value in stamps.items():
        account, _, kind = key.partition(":")
        if kind != "failed":
            continue
        failed_at, operation, status = value.split(" ", 2)
        answered = stamps.get(f"{account}:answered")
        since = float(answered) if answered else None
        if since is not None and (since >= float(failed_at) or now - since < grace):
            continue
        found.append(Unreachable(int(account), since, operation, status))
    return found


def check_whitesky() -> str:
    """Readiness: every account's whitesky answers."""
    now = time.time()
    try:
        stamps = counters().stamps(REACH)
    except (redis.RedisError, OSError) as exc:  # the broker's check says so
        return f"ok, not judged: its calls' record cannot be read ({type(exc).__name__})"
    grace = 2 * settings.OBSERVE_INTERVAL.total_seconds()
    failing = {u.account_id: u for u in unreachable(stamps, now=now, grace=grace)}
    accounts = list(Account.objects.filter(pk__in=failing).order_by("name", "pk"))
    if not accounts:
        return "ok"
    said = [failing[a.pk].said(a, now) for a in accounts[:SHOWN]]
    if len(accounts) > SHOWN:
        said.append(f"and {len(accounts) - SHOWN} more accounts")
    raise RuntimeError(f"not answering: {'; '.join(said)}")
