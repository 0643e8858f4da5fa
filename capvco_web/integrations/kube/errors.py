"""Errors of the Kubernetes client, each saying whether trying again can help.

Every failure of a call leaves the client as one of these, never as an exception of the
`kubernetes` package or of urllib3. `retryable` answers "may the same call succeed later?".
"""

from __future__ import annotations


class KubeError(Exception):
    """A Kubernetes API call failed.

    `message` is the first line of the server's Status message when it sent one, else our
    description (the HTTP status's standard phrase): never the rest of what it answered,
    which may be anything when the server is not a Kubernetes API server;
    `status` the HTTP status (None when no answer came), `reason` the Status reason
    (`NotFound`, `AlreadyExists`, `Expired`, ...), `operation` what was asked
    (`list nodes`).
    """

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        operation: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        self.message = message
        self.status = status
        self.reason = reason
        self.operation = operation
        self.retryable = self.default_retryable if retryable is None else retryable
        super().__init__(message)

    def __str__(self) -> str:
        where = self.operation or "kubernetes"
        if self.status is None:
            return f"{where}: {self.message}"
        return f"{where}: HTTP {self.status}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(message={self.message!r}, status={self.status!r}, "
            f"reason={self.reason!r}, operation={self.operation!r})"
        )


class Unreachable(KubeError):
    """No connection to the API server, or it broke before the whole answer came."""

    default_retryable = True


class ServerNotAllowed(KubeError):
    """Nothing was sent: the kubeconfig's server is not one KUBE_ALLOWED_HOSTS allows, or
    its name resolves only to addresses it does not (servers.py)."""


class Timeout(KubeError):
    """No answer (or no more of it) within the read timeout, or no connection within the
    connect timeout."""

    default_retryable = True


class Unauthorized(KubeError):
    """401: the kubeconfig's credential is refused (expired token, revoked certificate)."""


class Forbidden(KubeError):
    """403: the credential may not do this (RBAC); see docs/guides/kubernetes.md."""


class NotFound(KubeError):
    """404: the object, its namespace or its kind does not exist."""


class Conflict(KubeError):
    """409: the object exists already (`AlreadyExists`), or changed since it was read
    (`Conflict`): read it again before writing."""


class Expired(KubeError):
    """410: a listing's continue token, or a watch's resourceVersion, is too old; list
    again from the start."""

    default_retryable = True


class BadRequest(KubeError):
    """400, 405, 415 or 422: the request itself is wrong; sending it again will not help."""


class TooManyRequests(KubeError):
    """429: the API server sheds load. `retry_after` is its Retry-After, in seconds."""

    default_retryable = True

    def __init__(
        self,
        message: str,
        *,
        status: int | None = 429,
        reason: str = "",
        operation: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, reason=reason, operation=operation)
        self.retry_after = retry_after


class ServerError(KubeError):
    """5xx: the API server (or a proxy before it) failed."""

    default_retryable = True


class UnexpectedResponse(KubeError):
    """A 2xx answer that we could not read, or an object without its identity."""
