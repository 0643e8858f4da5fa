"""The HTTP side: one process serves many simulated clusters, each under its own base
path (`/clusters/<name>`, the `server` of its kubeconfig), and the control API (`/_sim/`).

Every cluster request goes through the same pipeline (`Simulator.handle_cluster`):

1. route the path to an operation (`list pods`, `patch nodes/status`, `discovery`, ...);
2. ask the fault plan whether this call fails, and sleep any injected latency;
3. answer an injected status, or else check the bearer token (401);
4. act on the cluster under the one lock; encode the answer outside it;
5. answer, or lose the answer (`drop`, `truncate`: the change is already made);
6. record the call in the log.
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from simulator.kube import errors
from simulator.kube.errors import StatusError
from simulator.kube.faults import Fault, FaultPlan, FaultSpecError
from simulator.kube.resources import PODS, ResourceType, custom_type
from simulator.kube.store import ClusterState, objects_put

CLUSTER_PREFIX = "/clusters/"
GIT_VERSION = "v1.33.0-capvco-sim"
# Deleting these answers the deleted object; other kinds answer a Status of success.
DELETE_ANSWERS_OBJECT = {PODS.storage_key}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def param(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[-1]


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    lost: str | None = None  # "drop" or "truncate": the answer never arrives whole

    @classmethod
    def json(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
        body = json.dumps(payload, separators=(",", ":")).encode()
        return cls(status=status, body=body, headers=headers or {})

    @classmethod
    def error(cls, exc: StatusError) -> Reply:
        return cls.json(exc.code, exc.status(), exc.headers)


@dataclass
class Route:
    """What a cluster request asks for."""

    verb: str  # discovery, list, get, create, update, patch, delete
    rt: ResourceType | None = None
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    discovery: Any = None  # the answer of a discovery call

    @property
    def operation(self) -> str:
        if self.rt is None:
            return "discovery"
        resource = f"{self.rt.plural}/{self.subresource}" if self.subresource else self.rt.plural
        return f"{self.verb} {resource}"


class ControlError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Simulator:
    def __init__(self, *, seed: int = 0, ca_pem: bytes = b"") -> None:
        self.lock = threading.Lock()
        self.ca_pem = ca_pem  # written into the kubeconfigs handed out
        self.seed = seed
        self.clusters: dict[str, ClusterState] = {}
        self.faults = FaultPlan(seed)
        self.calls: list[dict[str, Any]] = []
        self.continue_ttl = 300.0

    # ---- requests ------------------------------------------------------------------------

    def handle(self, request: Request) -> Reply:
        if request.path.startswith("/_sim/"):
            try:
                with self.lock:
                    return Reply.json(200, self.control(request))
            except ControlError as exc:
                return Reply.json(exc.status, {"message": str(exc)})
        if request.path.startswith(CLUSTER_PREFIX):
            name, _, rest = request.path[len(CLUSTER_PREFIX) :].partition("/")
            return self.handle_cluster(name, "/" + rest, request)
        return Reply(404, b"404 page not found", content_type="text/plain")

    def handle_cluster(self, name: str, path: str, request: Request) -> Reply:
        with self.lock:
            state = self.clusters.get(name)
        if state is None:
            return Reply(404, b"404 page not found", content_type="text/plain")
        operation = None
        try:
            with self.lock:
                route = _route(state, request.method, path, request)
            operation = route.operation
            with self.lock:
                fault = self.faults.decide(operation, name)
            reply = self._faulted(fault, lambda: self._answer(state, route, request))
        except StatusError as exc:
            reply = Reply.error(exc)
        with self.lock:
            self.calls.append(
                {
                    "cluster": name,
                    "operation": operation,
                    "method": request.method,
                    "path": path,
                    "query": {k: v[-1] for k, v in request.query.items()},
                    "status": None if reply.lost else reply.status,
                }
            )
        return reply

    def _faulted(self, fault: Fault | None, act: Any) -> Reply:
        if fault is not None and fault.latency_ms:
            time.sleep(fault.latency_ms / 1000)
        if fault is not None and fault.status is not None:
            exc = (
                errors.expired()
                if fault.status == 410
                else StatusError(fault.status, f"Simulated fault {fault.id}: HTTP {fault.status}")
            )
            retry_after = fault.retry_after
            if retry_after is None and fault.status in (429, 503):
                retry_after = 1
            if retry_after is not None:
                exc.headers["Retry-After"] = str(retry_after)
            return Reply.error(exc)
        reply: Reply = act()
        if fault is not None and fault.lost_response:
            reply.lost = fault.lost_response
        return reply

    def _answer(self, state: ClusterState, route: Route, request: Request) -> Reply:
        if request.headers.get("authorization", "") != f"Bearer {state.token}":
            raise errors.unauthorized()
        if route.rt is None:
            return Reply.json(200, route.discovery)
        rt = route.rt
        body: Any = None
        if route.verb in ("create", "update", "patch"):
            try:
                body = json.loads(request.body or b"null")
            except ValueError as exc:
                raise errors.bad_request(f"the body of the request is not JSON: {exc}") from exc
        with self.lock:
            if route.verb == "list":
                if request.param("watch") in ("true", "1"):
                    raise errors.bad_request("watch is not simulated")
                try:
                    limit = int(request.param("limit", "0") or 0)
                except ValueError:
                    raise errors.bad_request("limit must be an integer") from None
                answer = state.list(
                    rt,
                    route.namespace,
                    label_selector=request.param("labelSelector"),
                    field_selector=request.param("fieldSelector"),
                    limit=limit,
                    continue_token=request.param("continue"),
                )
                status = 200
            elif route.verb == "get":
                answer, status = state.get(rt, route.namespace, route.name), 200
            elif route.verb == "create":
                answer, status = state.create(rt, route.namespace, body), 201
            elif route.verb == "update":
                answer = state.replace(rt, route.namespace, route.name, body, route.subresource)
                status = 200
            elif route.verb == "patch":
                content_type = request.headers.get("content-type", "").split(";")[0].strip()
                answer = state.patch(
                    rt, route.namespace, route.name, content_type, body, route.subresource
                )
                status = 200
            else:
                deleted = state.delete(rt, route.namespace, route.name)
                status = 200
                if rt.storage_key in DELETE_ANSWERS_OBJECT or not rt.builtin:
                    answer = deleted
                else:
                    answer = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": route.name,
                            "kind": rt.plural,
                            "uid": deleted["metadata"]["uid"],
                            **({"group": rt.group} if rt.group else {}),
                        },
                    }
        # Encoded outside the lock: stored objects are never changed in place.
        return Reply.json(status, answer)

    # ---- control API ---------------------------------------------------------------------

    def control(self, request: Request) -> Any:
        parts = request.path[len("/_sim/") :].strip("/").split("/")
        method = request.method
        try:
            body = json.loads(request.body) if request.body else None
        except ValueError as exc:
            raise ControlError(400, f"the body is not JSON: {exc}") from exc
        if parts == ["reset"] and method == "POST":
            self.clusters.clear()
            self.faults = FaultPlan(self.seed)
            self.calls = []
            self.continue_ttl = 300.0
            return {}
        if parts == ["clusters"] and method == "GET":
            return {"clusters": sorted(self.clusters)}
        if parts == ["clusters"] and method == "POST":
            return self._cluster_add(body or {}, request.headers.get("host", ""))
        if parts[0] == "clusters" and len(parts) >= 2:
            return self._cluster_control(parts[1], parts[2:], method, body, request)
        if parts == ["faults"]:
            if method == "POST":
                try:
                    return {"id": self.faults.add(body).id}
                except FaultSpecError as exc:
                    raise ControlError(400, str(exc)) from exc
            if method == "GET":
                return {"faults": [fault.describe() for fault in self.faults.faults]}
            if method == "DELETE":
                self.faults = FaultPlan(self.seed)
                return {}
        if parts == ["calls"]:
            if method == "GET":
                reads = sum(1 for call in self.calls if call["method"] == "GET")
                return {"calls": self.calls, "reads": reads, "writes": len(self.calls) - reads}
            if method == "DELETE":
                self.calls = []
                return {}
        if parts == ["config"]:
            if method == "POST":
                ttl = (body or {}).get("continue_ttl_seconds")
                if ttl is not None:
                    if not isinstance(ttl, int | float) or ttl < 0:
                        raise ControlError(400, "continue_ttl_seconds must be a number >= 0")
                    self.continue_ttl = float(ttl)
                    for state in self.clusters.values():
                        state.continue_ttl = self.continue_ttl
            if method in ("GET", "POST"):
                return {"continue_ttl_seconds": self.continue_ttl}
        raise ControlError(404, f"no control call {method} {request.path}")

    def _cluster_add(self, body: dict[str, Any], host: str) -> dict[str, Any]:
        name = body.get("name")
        if not isinstance(name, str) or not name or "/" in name:
            raise ControlError(400, '"name" is required (no "/")')
        if name in self.clusters:
            raise ControlError(409, f"cluster {name} exists")
        state = ClusterState(name, str(body.get("token") or secrets.token_urlsafe(24)))
        state.continue_ttl = self.continue_ttl
        self.clusters[name] = state
        return self._cluster_described(state, host)

    def control_cluster_add(self, name: str, host: str) -> dict[str, Any]:
        """Add a cluster from the command line (`--cluster`)."""
        with self.lock:
            return self._cluster_add({"name": name}, host)

    def _cluster_described(self, state: ClusterState, host: str) -> dict[str, Any]:
        server = f"https://{host}{CLUSTER_PREFIX}{state.name}"
        return {
            "name": state.name,
            "server": server,
            "token": state.token,
            "kubeconfig": kubeconfig(state.name, server, state.token, self.ca_pem),
        }

    def _cluster_control(
        self, name: str, rest: list[str], method: str, body: Any, request: Request
    ) -> Any:
        state = self.clusters.get(name)
        if state is None:
            raise ControlError(404, f"no cluster {name}")
        if rest == [] and method == "DELETE":
            del self.clusters[name]
            return {}
        if rest == [] and method == "GET":
            return self._cluster_described(state, request.headers.get("host", ""))
        if rest == ["objects"] and method == "POST":
            objects = (body or {}).get("objects")
            if not isinstance(objects, list):
                raise ControlError(400, '"objects" must be a list of Kubernetes objects')
            try:
                return {"resourceVersion": str(objects_put(state, objects))}
            except StatusError as exc:
                raise ControlError(400, exc.message) from exc
        if rest == ["compact"] and method == "POST":
            state.compact()
            return {"resourceVersion": str(state.resource_version)}
        if rest == ["resources"] and method == "POST":
            spec = body or {}
            try:
                rt = custom_type(
                    group=spec["group"],
                    version=spec["version"],
                    plural=spec["plural"],
                    kind=spec["kind"],
                    namespaced=bool(spec.get("namespaced", True)),
                    status=bool(spec.get("status", True)),
                )
            except KeyError as exc:
                raise ControlError(400, f"{exc.args[0]!r} is required") from exc
            state.register(rt)
            return {"apiVersion": rt.api_version, "plural": rt.plural}
        if rest == ["state"] and method == "GET":
            return {"resourceVersion": str(state.resource_version), "counts": state.counts()}
        raise ControlError(404, f"no control call {method} {request.path}")


def kubeconfig(name: str, server: str, token: str, ca_pem: bytes) -> dict[str, Any]:
    user = f"{name}-admin"
    cluster = {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
        "current-context": name,
    }


# ---- routing ---------------------------------------------------------------------------

_ITEM_VERBS = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_SUBRESOURCE_VERBS = {"GET": "get", "PUT": "update", "PATCH": "patch"}


def _route(state: ClusterState, method: str, path: str, request: Request) -> Route:
    parts = [part for part in path.strip("/").split("/") if part]
    if method == "GET":
        found = _discovery(state, parts, request)
        if found is not None:
            return Route("discovery", discovery=found)
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise StatusError(404, "the server could not find the requested resource")
    if not rest:
        raise StatusError(404, "the server could not find the requested resource")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespaced = state.types.get((group, version, rest[2]))
        if namespaced is not None and namespaced.namespaced:
            namespace, rest = rest[1], rest[2:]
    rt = state.resource_type(group, version, rest[0])
    if rt.namespaced and not namespace and len(rest) > 1:
        raise StatusError(404, "the server could not find the requested resource")
    if len(rest) == 1:
        if method == "GET":
            return Route("list", rt, namespace)
        if method == "POST" and (namespace or not rt.namespaced):
            return Route("create", rt, namespace)
        raise errors.method_not_allowed(method, rt)
    if len(rest) == 2:
        verb = _ITEM_VERBS.get(method)
        if verb is None:
            raise errors.method_not_allowed(method, rt)
        return Route(verb, rt, namespace, rest[1])
    if len(rest) == 3 and rest[2] == "status" and rt.status_subresource:
        verb = _SUBRESOURCE_VERBS.get(method)
        if verb is None:
            raise errors.method_not_allowed(method, rt)
        return Route(verb, rt, namespace, rest[1], "status")
    raise StatusError(404, "the server could not find the requested resource")


def _discovery(state: ClusterState, parts: list[str], request: Request) -> Any:
    """The discovery documents the clients read (paths with or without a trailing /)."""
    if parts == ["version"]:
        return {
            "major": "1",
            "minor": "33",
            "gitVersion": GIT_VERSION,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": request.headers.get("host", "")}
            ],
        }
    if parts == ["api", "v1"]:
        return _resource_list(state, "", "v1")
    groups = state.groups()
    if parts == ["apis"]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_group(name, versions) for name, versions in sorted(groups.items())],
        }
    if len(parts) == 2 and parts[0] == "apis":
        if parts[1] not in groups:
            raise StatusError(404, "the server could not find the requested resource")
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(parts[1], groups[parts[1]])}
    if len(parts) == 3 and parts[0] == "apis":
        if parts[2] not in groups.get(parts[1], []):
            raise StatusError(404, "the server could not find the requested resource")
        return _resource_list(state, parts[1], parts[2])
    return None


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def _resource_list(state: ClusterState, group: str, version: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [
            entry
            for rt in sorted(state.resources_of(group, version), key=lambda rt: rt.plural)
            for entry in rt.discovery()
        ],
    }


# ---- the HTTP server -------------------------------------------------------------------


HANDSHAKE_TIMEOUT = 10.0


class KubeHTTPServer(ThreadingHTTPServer):
    """HTTPS only: the TLS handshake runs in the connection's own thread, so a client
    that never finishes it holds up nobody else."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(
        self, address: tuple[str, int], simulator: Simulator, tls: ssl.SSLContext
    ) -> None:
        super().__init__(address, _Handler)
        self.simulator = simulator
        self.tls = tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        assert isinstance(request, socket.socket)
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return  # not TLS, or a client that does not trust our CA: nothing to answer
        wrapped.settimeout(None)
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: KubeHTTPServer

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        body = self._read_body()
        url = urlsplit(self.path)
        request = Request(
            method=self.command,
            path=unquote(url.path),
            query=parse_qs(url.query, keep_blank_values=True),
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        try:
            reply = self.server.simulator.handle(request)
        except Exception as exc:  # a bug in the simulator: answer 500, keep serving
            reply = Reply.error(StatusError(500, f"simulator error: {type(exc).__name__}: {exc}"))
        if reply.lost == "drop":
            self.close_connection = True
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if reply.lost == "truncate":
            self.wfile.write(reply.body[: len(reply.body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(reply.body)

    do_GET = _serve
    do_POST = _serve
    do_PUT = _serve
    do_PATCH = _serve
    do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the call log (GET /_sim/calls) is the record
