"""The HTTP side: routing, faults, authentication, the call log and persistence.

Every ``/api/1`` request goes through the same pipeline (``Simulator.handle_api``):

1. route the path to an operationId (unknown path 404, other method 405);
2. ask the fault plan whether this call fails, and sleep any injected latency;
3. answer an injected status, or else check the bearer JWT (401);
4. act on the world, under the one lock, and save the state file if anything changed;
5. answer, or lose the answer (``lost_response``: the change is already committed);
6. record the call in the log.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from simulator.whitesky import api
from simulator.whitesky.auth import bearer_token, issue_jwt, verify_jwt
from simulator.whitesky.control import handle_control
from simulator.whitesky.errors import MethodNotAllowed, NotFound, SimError
from simulator.whitesky.faults import Fault, FaultPlan
from simulator.whitesky.records import Tables
from simulator.whitesky.state import Clock, World
from simulator.whitesky.switches import DEFAULTS
from simulator.whitesky.wire import Reply, Request
from simulator.whitesky.worldfile import build_world

API_PREFIX = "/api/1"
IAM_REFRESH_PATH = "/v1/oauth/jwt/refresh"
# Not an operationId of the description, but faults may target the IAM refresh too.
IAM_REFRESH_OPERATION = "refreshJWT"
STATE_FORMAT = 1


class Router:
    """Path templates to operations; literal segments must match, ``{name}`` takes one."""

    def __init__(self, routes: tuple[tuple[str, str, str, api.Handler], ...]) -> None:
        self._routes = [
            (method, template.strip("/").split("/"), operation, handler)
            for method, template, operation, handler in routes
        ]

    def match(self, method: str, path: str) -> tuple[str, api.Handler, dict[str, str]]:
        segments = path.strip("/").split("/")
        allowed: list[str] = []
        for route_method, template, operation, handler in self._routes:
            params = _match_segments(template, segments)
            if params is None:
                continue
            if route_method == method:
                return operation, handler, params
            allowed.append(route_method)
        if allowed:
            raise MethodNotAllowed(
                "The method is not allowed for the requested URL.", allow=sorted(set(allowed))
            )
        raise NotFound(
            "The requested URL was not found on the server. If you entered the URL manually "
            "please check your spelling and try again."
        )


def _match_segments(template: list[str], segments: list[str]) -> dict[str, str] | None:
    if len(template) != len(segments):
        return None
    params = {}
    for pattern, segment in zip(template, segments, strict=True):
        if pattern.startswith("{") and pattern.endswith("}"):
            if not segment:
                return None
            params[pattern[1:-1]] = segment
        elif pattern != segment:
            return None
    return params


class Simulator:
    """The simulated whitesky: the world, its configuration, faults and the call log."""

    def __init__(
        self,
        world_spec: dict[str, Any],
        *,
        state_path: Path | None = None,
        token_ttl: int = 3600,
        seed: int = 0,
    ) -> None:
        self.lock = threading.Lock()
        self.secret = secrets.token_bytes(32)
        self.router = Router(api.ROUTES)
        self.operations = {operation for _, _, operation, _ in api.ROUTES}
        self.initial_world = world_spec
        self.initial_token_ttl = token_ttl
        self.seed = seed
        self.state_path = state_path
        self._saved_fingerprint: tuple[Any, ...] | None = None
        self.faults = FaultPlan(seed)
        self.calls: list[dict[str, Any]] = []
        self.token_ttl = token_ttl
        self.world = self._fresh_world(world_spec)
        if state_path is not None and state_path.exists():
            self._load_state(state_path)
        self.persist()

    # ---- lifecycle ---------------------------------------------------------------------

    def _fresh_world(self, spec: dict[str, Any]) -> World:
        return build_world(spec, Clock(), dict(DEFAULTS))

    def reset(self, world_spec: dict[str, Any] | None = None) -> None:
        """Back to a fresh world (the starting one unless given), with everything else."""
        world = self._fresh_world(world_spec if world_spec is not None else self.initial_world)
        self.world = world
        self.token_ttl = self.initial_token_ttl
        self.faults = FaultPlan(self.seed)
        self.calls = []
        self.persist()

    def _load_state(self, path: Path) -> None:
        saved = json.loads(path.read_text())
        if saved.get("format") != STATE_FORMAT:
            raise ValueError(f"state file {path} has an unknown format")
        switches = dict(DEFAULTS)
        switches.update({k: v for k, v in saved["switches"].items() if k in DEFAULTS})
        self.world = World(
            Tables.from_dict(saved["tables"]),
            clock=Clock(float(saved["clock_offset"])),
            switches=switches,
        )
        self.token_ttl = int(saved["token_ttl"])

    def persist(self) -> None:
        """Save the state file when anything changed; the caller holds the lock (or is init)."""
        if self.state_path is None:
            return
        fingerprint = (
            id(self.world),
            self.world.version,
            self.world.clock.offset,
            tuple(sorted(self.world.switches.items())),
            self.token_ttl,
        )
        if fingerprint == self._saved_fingerprint:
            return
        payload = {
            "format": STATE_FORMAT,
            "tables": self.world.tables.to_dict(),
            "clock_offset": self.world.clock.offset,
            "switches": self.world.switches,
            "token_ttl": self.token_ttl,
        }
        # Write beside the target, then rename: a crash never leaves half a state file.
        directory = self.state_path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".whitesky-state-", dir=directory)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(payload, handle, separators=(",", ":"))
            os.replace(tmp, self.state_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._saved_fingerprint = fingerprint

    # ---- tokens ------------------------------------------------------------------------

    def token_clock(self) -> float:
        if self.world.switches["token_expiry_uses_sim_clock"]:
            return self.world.clock.now()
        return time.time()

    def issue_token(self, subject: str | None = None) -> tuple[str, int]:
        """A JWT for the seeded customer; `subject` names who holds it (default: the
        seeded user). The call log says which subject made each call."""
        now = self.token_clock()
        token = issue_jwt(
            self.secret,
            subject=subject or self.world.tables.user.username,
            now=now,
            ttl=self.token_ttl,
        )
        return token, int(now) + self.token_ttl

    # ---- request handling --------------------------------------------------------------

    def handle(self, request: Request) -> Reply:
        if request.path == API_PREFIX or request.path.startswith(API_PREFIX + "/"):
            return self.handle_api(request)
        if request.path.startswith("/_sim/"):
            return handle_control(self, request)
        if request.path == IAM_REFRESH_PATH:
            return self.handle_refresh(request)
        return Reply.error(NotFound(f"No such path: {request.path}"))

    def handle_api(self, request: Request) -> Reply:
        operation: str | None = None
        # The subject of the token that authenticated the call (None: none did).
        caller: dict[str, str] = {}
        try:
            operation, handler, params = self.router.match(
                request.method, request.path[len(API_PREFIX) :]
            )
        except SimError as exc:
            reply: Reply | None = Reply.error(exc)
        else:
            reply = self._faulted(operation, lambda: self._answer(handler, params, request, caller))
        if reply is None:
            return Reply(status=0, drop=True)
        with self.lock:
            self.calls.append(
                {
                    "operation": operation,
                    "method": request.method,
                    "path": request.path,
                    "query": request.query,
                    "status": None if reply.drop else reply.status,
                    "subject": caller.get("subject"),
                }
            )
        return reply

    def _faulted(self, operation: str, act: Callable[[], Reply]) -> Reply | None:
        """Run `act` under the fault a test set for `operation`: a delay, an error instead
        of the answer, or the answer lost after the change was made. None: the world was
        reset while the call was delayed, and a call never acts on a world it was not
        sent to (its connection is dropped, and it is not in the new world's call log)."""
        with self.lock:
            fault = self.faults.decide(operation)
            world = self.world
        if fault is not None and fault.latency_ms:
            time.sleep(fault.latency_ms / 1000)
            with self.lock:
                if self.world is not world:
                    return None
        if fault is not None and fault.status is not None:
            return _fault_reply(fault)
        reply = act()
        if fault is not None and fault.lost_response == "504":
            return Reply.json(504, {"message": "Gateway Timeout"})
        if fault is not None and fault.lost_response == "drop":
            return Reply(status=0, drop=True)
        return reply

    def _answer(
        self,
        handler: api.Handler,
        params: dict[str, str],
        request: Request,
        caller: dict[str, str],
    ) -> Reply:
        try:
            token = bearer_token(request.headers.get("Authorization"))
            with self.lock:
                claims = verify_jwt(self.secret, token, now=self.token_clock())
                caller["subject"] = str(claims["sub"])
                call = api.Call(
                    world=self.world,
                    path=params,
                    query=parse_qs(request.query, keep_blank_values=True),
                    body=request.body,
                    host=request.headers.get("Host", ""),
                )
                try:
                    payload = handler(call)
                finally:
                    # A refused call may still have changed something (switch
                    # vm_create_atomic_with_gpu off), so persist either way.
                    self.persist()
        except SimError as exc:
            return Reply.error(exc)
        if isinstance(payload, api.EncodedJson):
            return Reply(status=200, body=payload.body)
        return Reply.json(200, payload)

    def handle_refresh(self, request: Request) -> Reply:
        """The IAM: the current (unexpired) JWT as bearer buys a new one, as plain text."""
        if request.method != "GET":
            return Reply.error(MethodNotAllowed("Method not allowed", allow=["GET"]))
        reply = self._faulted(IAM_REFRESH_OPERATION, lambda: self._refreshed_token(request))
        return Reply(status=0, drop=True) if reply is None else reply

    def _refreshed_token(self, request: Request) -> Reply:
        try:
            token = bearer_token(request.headers.get("Authorization"))
            with self.lock:
                claims = verify_jwt(self.secret, token, now=self.token_clock())
                # The new token is the same holder's.
                new_token, _ = self.issue_token(str(claims["sub"]))
        except SimError as exc:
            return Reply.error(exc)
        return Reply(status=200, body=new_token.encode(), content_type="text/plain")


def _fault_reply(fault: Fault) -> Reply:
    headers = {}
    retry_after = fault.retry_after
    if retry_after is None and fault.status in (429, 503):
        retry_after = 1
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    status = fault.status or 500
    return Reply.json(status, {"message": f"Simulated fault {fault.id}: HTTP {status}"}, headers)


# ---- the HTTP server -------------------------------------------------------------------------


class SimulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], simulator: Simulator) -> None:
        super().__init__(address, _Handler)
        self.simulator = simulator


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 with Content-Length on every answer keeps connections alive between calls.
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes; with Nagle on, a kept-alive connection
    # waits for the client's delayed ACK (~40 ms) before sending the body.
    disable_nagle_algorithm = True
    server: SimulatorHTTPServer

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        body = self._read_body()
        url = urlsplit(self.path)
        # Decode before routing, as Werkzeug does: an encoded "/" splits a segment.
        request = Request(
            method=self.command,
            path=unquote(url.path),
            query=url.query,
            headers=self.headers,  # type: ignore[arg-type]
            body=body,
        )
        try:
            reply = self.server.simulator.handle(request)
        except Exception as exc:  # a bug in the simulator: answer 500, keep serving
            reply = Reply.json(500, {"message": f"simulator error: {type(exc).__name__}: {exc}"})
        if reply.drop:
            self.close_connection = True
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    do_GET = _serve
    do_POST = _serve
    do_PUT = _serve
    do_PATCH = _serve
    do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the call log (GET /_sim/calls) is the record
