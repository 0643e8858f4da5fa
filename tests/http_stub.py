"""A real local HTTP server that answers one fixed reply and records what it was sent
(pytest plugin: the ``http_stub`` fixture).

For what the simulator never does: answer HTML, redirect elsewhere, or stand in for a host
that must never see a request (a place an account's URL was pointed at)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class HttpStub:
    """Answers every request with `reply`; `received` holds every request, in order."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.received: list[Received] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                stub.received.append(Received(self.command, self.path, dict(self.headers)))
                self.send_response(stub.reply.status)
                for name, value in stub.reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(stub.reply.body)))
                self.end_headers()
                self.wfile.write(stub.reply.body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def html(status: int, text: str) -> Reply:
    page = f"<html><body><h1>{text}</h1></body></html>".encode()
    return Reply(status, page, {"Content-Type": "text/html; charset=utf-8"})


def redirect(status: int, location: str) -> Reply:
    return Reply(status, b"", {"Location": location})


@pytest.fixture
def http_stub() -> Iterator[Callable[[Reply], HttpStub]]:
    """`http_stub(Reply(...))`: a new stub server on a free port, closed after the test."""
    stubs: list[HttpStub] = []

    def make(reply: Reply) -> HttpStub:
        stubs.append(HttpStub(reply))
        return stubs[-1]

    yield make
    for stub in stubs:
        stub.close()
