"""Errors the simulated platform answers with.

Each carries the HTTP status the real API is expected to use; the body is always the
Flask-RESTX shape ``{"message": ...}`` (inferred: the description names error responses but
gives them no schema).
"""

from __future__ import annotations


class SimError(Exception):
    status = 500

    def __init__(self, message: str, *, errors: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors

    def body(self) -> dict[str, object]:
        body: dict[str, object] = {"message": self.message}
        if self.errors:
            body["errors"] = self.errors
        return body


class BadRequest(SimError):
    status = 400


class Unauthorized(SimError):
    status = 401


class Forbidden(SimError):
    status = 403


class NotFound(SimError):
    status = 404


class MethodNotAllowed(SimError):
    status = 405

    def __init__(self, message: str, *, allow: list[str]) -> None:
        super().__init__(message)
        self.allow = allow


class Conflict(SimError):
    status = 409


def invalid_parameter(name: str, problem: str) -> BadRequest:
    """Flask-RESTX's answer to a bad input, with the parameter also named in the message."""
    return BadRequest(f"Input payload validation failed: {name}: {problem}", errors={name: problem})
