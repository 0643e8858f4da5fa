"""Failures as the real kube-apiserver answers them: a `Status` object with its code,
reason and message, worded as the server words them."""

from __future__ import annotations

from typing import Any

from simulator.kube.resources import ResourceType

EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter, or use the continue token in "
    "this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or "
    "deleted between the time the first chunk was returned and now may show up in the list."
)

# The reason a bare status code carries when nothing more specific is known.
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class StatusError(Exception):
    """A failed call: `status()` is the body the server sends."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        continue_token: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "")
        self.details = details
        self.continue_token = continue_token
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {"continue": self.continue_token} if self.continue_token else {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> StatusError:
    return StatusError(
        404, f'{rt.qualified} "{name}" not found', reason="NotFound", details=_details(rt, name)
    )


def already_exists(rt: ResourceType, name: str) -> StatusError:
    return StatusError(
        409,
        f'{rt.qualified} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(rt, name),
    )


def conflict(rt: ResourceType, name: str) -> StatusError:
    return StatusError(
        409,
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        reason="Conflict",
        details=_details(rt, name),
    )


def invalid(rt: ResourceType, name: str, problem: str) -> StatusError:
    return StatusError(
        422,
        f'{rt.kind} "{name}" is invalid: {problem}',
        reason="Invalid",
        details=_details(rt, name),
    )


def bad_request(message: str) -> StatusError:
    return StatusError(400, message, reason="BadRequest")


def expired(continue_token: str = "") -> StatusError:
    return StatusError(410, EXPIRED_MESSAGE, reason="Expired", continue_token=continue_token)


def too_old(version: int, oldest: int) -> StatusError:
    """A watch from a resourceVersion the history no longer holds (the real server's words)."""
    return StatusError(410, f"too old resource version: {version} ({oldest})", reason="Expired")


def unsupported_media_type(content_type: str) -> StatusError:
    """A body in a format the server does not decode: clients fall back to JSON on 415."""
    return StatusError(
        415,
        f"the body of the request was in an unknown format - accepted "
        f"media types include: application/json, application/yaml "
        f'(not "{content_type}")',
        reason="UnsupportedMediaType",
    )


def unsupported_patch(accepted: list[str]) -> StatusError:
    return StatusError(
        415,
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
        reason="UnsupportedMediaType",
    )


def method_not_allowed(verb: str, rt: ResourceType | None = None) -> StatusError:
    what = f' on resource "{rt.plural}"' if rt else ""
    return StatusError(405, f"the server does not allow this method{what} ({verb})")


def unauthorized() -> StatusError:
    return StatusError(401, "Unauthorized", reason="Unauthorized")
