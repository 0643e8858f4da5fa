"""Errors of the whitesky client, each saying whether trying again can help.

Every failure of a call leaves the client as one of these, never as a `requests` exception.
`retryable` answers one question for the caller: "may the same call succeed later?".

`ResponseLost` is the one to read carefully: a write that is not safe to repeat (a vGPU
reserve, a VM or cloudspace create, a NIC attach) was sent, and no answer came back (a read
timeout, a dropped connection, a gateway error). The server may or may not have acted. Trying
again later can help, but only after the caller has looked again (for instance found its
reservation by name in the vGPU listing): repeating the call blindly may create a second one.
"""

from __future__ import annotations

import unicodedata

MESSAGE_LIMIT = 300
"""The longest message an error carries (it ends up in failure messages, logs, pages)."""

_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` on one line (control and invisible characters as spaces, runs of spaces as
    one) and at most `limit` characters long."""
    visible = "".join(" " if unicodedata.category(c) in _HIDDEN else c for c in text)
    flat = " ".join(visible.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "\u2026"


class WhiteskyError(Exception):
    """A whitesky call failed.

    `message` is the server's own `{"message"}` when it sent one, else our description; on
    one line and short, whatever the server sent (see `one_line`).
    `status` is the HTTP status (None when no answer came), `operation` the operationId.
    """

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        operation: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        message = one_line(message)
        self.message = message
        self.status = status
        self.operation = operation
        self.retryable = self.default_retryable if retryable is None else retryable
        super().__init__(message)

    @property
    def outcome_unknown(self) -> bool:
        """Whether the call may have acted although it failed: no answer came, or the
        server failed midway (5xx). A refusal (4xx) means nothing happened."""
        return isinstance(self, ResponseLost) or self.status is None or self.status >= 500

    def __str__(self) -> str:
        where = self.operation or "whitesky"
        if self.status is None:
            return f"{where}: {self.message}"
        return f"{where}: HTTP {self.status}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(message={self.message!r}, status={self.status!r}, "
            f"operation={self.operation!r}, retryable={self.retryable!r})"
        )


class BadRequest(WhiteskyError):
    """400/422: the request itself is wrong; sending it again will not help."""


class Unauthorized(WhiteskyError):
    """401 that survived one token refresh, or the refresh itself failed."""


class HostNotAllowed(WhiteskyError):
    """The URL of the call (API or IAM) is not in the allow-list: nothing was sent, the
    credential least of all. Fixing the account's URL (or the list) is the only cure."""


class Forbidden(WhiteskyError):
    """403: the credential has no access (e.g. "Customer has no access to location")."""


class NotFound(WhiteskyError):
    """404: the object (or the customer) does not exist."""


class Conflict(WhiteskyError):
    """409: the object is in a state that refuses the call (e.g. vGPU attach to a running VM).

    Not retryable as such: the state has to change first.
    """


class CapacityExhausted(Conflict):
    """409 on a vGPU reserve: the card has no free instance. The message names the card.

    Retryable in the sense that capacity can come back; a caller usually picks another card.
    """

    default_retryable = True


class RateLimited(WhiteskyError):
    """429. `retry_after` is the server's Retry-After in seconds, when it gave one."""

    default_retryable = True

    def __init__(
        self,
        message: str,
        *,
        status: int | None = 429,
        operation: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, operation=operation)
        self.retry_after = retry_after


class Unavailable(WhiteskyError):
    """5xx, a refused connection, or a timeout where repeating the call is harmless.
    `retry_after` is the server's Retry-After (a 503 may send one)."""

    default_retryable = True

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        operation: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, operation=operation)
        self.retry_after = retry_after


class ResponseLost(WhiteskyError):
    """A write that is not safe to repeat was sent and its outcome is unknown.

    Retryable, but only after re-observing (see the module docstring). Deliberately not a
    subclass of `Unavailable`, so that a handler that retries on `Unavailable` cannot repeat a
    reserve or a create by accident.
    """

    default_retryable = True


class DeadlinePassed(WhiteskyError):
    """The caller's time for its calls (the client's `deadline`, a pass's) was up before
    this call was sent: nothing was sent. The next pass has time of its own."""

    default_retryable = True


class UnexpectedResponse(WhiteskyError):
    """A 2xx answer that we could not read, or that contradicts itself."""


class IncompleteListing(WhiteskyError):
    """A paginated listing did not add up (items collected differ from `pagination.count`,
    or the listing moved between pages). Reading it again later can help."""

    default_retryable = True
