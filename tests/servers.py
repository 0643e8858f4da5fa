"""Servers of a test's own, which the test stops, kills and cuts at will: a private
PostgreSQL, a private Redis and a TCP proxy on 127.0.0.1. Nothing here imports Django, so
that a command can start them before Django reads its settings."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")
# PostgreSQL refuses to run as root: as root, the server runs as this user.
PG_USER = "postgres"


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now: two runs on one host never share one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrivatePostgres:
    """A PostgreSQL server of one test alone: its data folder, port and log."""

    data: Path
    port: int
    log: Path
    as_user: list[str]

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data}"
        self.pg_ctl("-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-m", mode, "-w", "stop")


@contextmanager
def private_postgres(keep_log: Path, data: Path | None = None) -> Iterator[PrivatePostgres]:
    """A fresh PostgreSQL 15 (initdb in a temporary folder, on a free port), started; its
    log is copied to `keep_log` at the end. `data`: an empty folder to hold its data (on
    a disk of the test's choosing), instead of one in the temporary folder."""
    home = Path(tempfile.mkdtemp(prefix="capvco-pg-"))
    as_user = []
    if os.geteuid() == 0:
        # The server's user must reach its folders: a folder of root's alone would not do.
        for folder in (home, data):
            if folder is not None:
                shutil.chown(folder, PG_USER)
        as_user = ["runuser", "-u", PG_USER, "--"]
    server = PrivatePostgres(data or home / "data", free_port(), home / "postgres.log", as_user)
    try:
        subprocess.run(
            [*as_user, str(PG_BIN / "initdb"), "-D", str(server.data), "-U", "postgres",
             "-A", "trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        server.start()
        yield server
    finally:
        with suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            server.stop("immediate")
        if server.log.exists():
            shutil.copy(server.log, keep_log)
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def tmpfs(mount: Path, megabytes: int) -> Iterator[Path]:
    """A tmpfs of `megabytes` MiB mounted on the empty folder `mount` (needs root), unmounted
    at the end: a small disk of the test's own, to fill."""
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        raise OSError(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def disk_fill(disk: Path) -> Path:
    """Write a file on `disk` until it has no byte left; answers the file (delete it to
    free the space)."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError:
            pass
    with filler.open("ab", buffering=0) as out:  # the last bytes a chunk did not fit
        try:
            while True:
                out.write(b"\0")
        except OSError:
            pass
    return filler


class PrivateRedis:
    """A redis-server of one run alone, keeping nothing on disk, as the embedded default's
    broker: killed, it comes back empty."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            with suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"redis-server did not start: {self.log.read_text()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: every queued message is lost."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@contextmanager
def private_redis(log: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(log)
    server.start()
    try:
        yield server
    finally:
        server.kill()


class TcpProxy:
    """A TCP proxy on 127.0.0.1 in front of `target_port`, in one of three modes: "pass"
    (forward), "refuse" (every connection, new or open, reset at once) or "hold" (accepted,
    and then nothing: no byte forwarded, none answered; held connections are cut when the
    proxy passes again, as a network that comes back does to connections it lost)."""

    MODES = ("pass", "refuse", "hold")

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode = "pass"
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, mode: str) -> None:
        assert mode in self.MODES, mode
        with self._lock:
            self.mode = mode
            if mode != "hold":  # refused, or back: whatever was open or held is cut
                for sock in list(self._open):
                    self._cut(sock)
                self._open.clear()

    def close(self) -> None:
        self._stopped.set()
        self.set("refuse")
        self._listener.close()
        self._thread.join(timeout=5)

    @staticmethod
    def _cut(sock: socket.socket) -> None:
        with suppress(OSError):  # a reset, not a polite close
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with suppress(OSError):
            sock.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                mode = self.mode
                if mode == "refuse":
                    self._cut(client)
                    continue
                self._open.add(client)
            if mode == "hold":
                continue  # kept open, never read: cut when the proxy passes again
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 2)
            except OSError:
                self._forget(client)
                continue
            with self._lock:
                self._open.add(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._open.discard(sock)
                self._cut(sock)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                while self.mode == "hold":  # the network is gone: nothing passes
                    if self._stopped.wait(0.05):
                        return
                sink.sendall(data)
        except OSError:
            pass
        self._forget(source, sink)
