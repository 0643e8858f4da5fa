"""A request and its reply, as the server pipeline passes them around."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from simulator.whitesky.errors import MethodNotAllowed, SimError


@dataclass
class Request:
    method: str
    path: str  # decoded, without the query string
    query: str
    headers: Mapping[str, str]
    body: bytes


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without any answer

    @classmethod
    def json(cls, status: int, payload: object, headers: dict[str, str] | None = None) -> Reply:
        body = json.dumps(payload, separators=(",", ":")).encode()
        return cls(status=status, body=body, headers=headers or {})

    @classmethod
    def error(cls, exc: SimError) -> Reply:
        headers = {"Allow": ", ".join(exc.allow)} if isinstance(exc, MethodNotAllowed) else {}
        return cls.json(exc.status, exc.body(), headers)
