"""A pooled connection the far end dropped while it was idle (a load balancer's or a NAT's
idle timeout, an API server that restarted, a network cut and back): the client finds out
only when it sends on it again, and the request fails before any answer. A read sent on
such a connection is sent once more, on a new one; a write never is (it may have landed),
and a read that timed out is not either (a timeout costs one read timeout)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from capvco_web.integrations import kube
from tests.integrations.kube.test_client_reach import client

POD = {
    "kind": "Pod",
    "apiVersion": "v1",
    "metadata": {"name": "p", "namespace": "net", "uid": "u-1"},
    "spec": {"nodeName": "node-0"},
    "status": {"phase": "Running"},
}


class DroppingServer:
    """An HTTP/1.1 server on 127.0.0.1 that answers every request, keeping the connection
    open, except the second request of its first connection: that one is read and the
    connection dropped without an answer (reset), as a connection the far end forgot.
    `requests` lists (connection number, request line) of what it received."""

    def __init__(self, *, silent: bool = False) -> None:
        self.silent = silent  # never answers: each request waits out the client
        self.requests: list[tuple[int, str]] = []
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.origin = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        number = 0
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            number += 1
            thread = threading.Thread(target=self._serve, args=(connection, number), daemon=True)
            thread.start()

    def _serve(self, connection: socket.socket, number: int) -> None:
        reader = connection.makefile("rb")
        served = 0
        try:
            while line := reader.readline():
                length = 0
                while (header := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                reader.read(length)
                self.requests.append((number, line.decode().strip()))
                served += 1
                if self.silent:
                    continue
                if number == 1 and served == 2:
                    connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    return
                body = json.dumps(POD if line.startswith(b"GET") else {"kind": "Status"})
                connection.sendall(
                    f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
                )
        except OSError:
            pass
        finally:
            reader.close()
            connection.close()

    def close(self) -> None:
        self._socket.close()


@pytest.fixture
def server() -> Iterator[DroppingServer]:
    found = DroppingServer()
    yield found
    found.close()


def test_a_read_on_a_connection_dropped_while_idle_is_sent_again_on_a_new_one(
    server: DroppingServer,
) -> None:
    with client(server.origin, server.origin) as reads:
        assert reads.get_pod(namespace="net", name="p").uid == "u-1"
        assert reads.get_pod(namespace="net", name="p").uid == "u-1"  # its connection dropped

    path = "GET /api/v1/namespaces/net/pods/p HTTP/1.1"
    assert server.requests == [(1, path), (1, path), (2, path)]


def test_a_write_on_a_connection_dropped_while_idle_is_not_sent_again(
    server: DroppingServer,
) -> None:
    with client(server.origin, server.origin) as writes:
        writes.get_pod(namespace="net", name="p")
        with pytest.raises(kube.Unreachable, match="connection broke"):
            writes.evict_pod(namespace="net", name="p")  # it may have landed: never twice

    assert [number for number, _ in server.requests] == [1, 1]
    assert server.requests[1][1].startswith("POST /api/v1/namespaces/net/pods/p/eviction")


def test_a_read_that_timed_out_is_not_sent_again() -> None:
    silent = DroppingServer(silent=True)
    try:
        with client(silent.origin, silent.origin) as reads, pytest.raises(kube.Timeout):
            reads.get_pod(namespace="net", name="p")
    finally:
        silent.close()

    assert len(silent.requests) == 1
