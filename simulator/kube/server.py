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
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from simulator.kube import errors, jobs, openapi, patches, pods, tables
from simulator.kube.dcgm import DcgmSpecError, dcgm_nodes
from simulator.kube.errors import StatusError
from simulator.kube.faults import Fault, FaultPlan, FaultSpecError
from simulator.kube.resources import PODS, ResourceType, custom_type
from simulator.kube.selectors import Matcher, matcher
from simulator.kube.store import WATCH_HISTORY, ClusterState, Event, as_version, objects_put

CLUSTER_PREFIX = "/clusters/"
GIT_VERSION = "v1.33.0-capvco-sim"
BOOKMARK_INTERVAL = 60.0  # seconds between two bookmarks of a quiet watch, as the real server
WATCH_TIMEOUT = 1800  # seconds a watch without timeoutSeconds lasts (the server's minimum)
JSON_TYPES = ("application/json", "")
# Deleting these answers the deleted object; other kinds answer a Status of success.
DELETE_ANSWERS_OBJECT = {PODS.storage_key}
# A pod's subresources that are only posted to (simulator/kube/pods.py).
POD_ACTIONS = ("binding", "eviction")


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
    stream: Iterator[bytes] | None = None  # a watch: sent chunked, one event a chunk

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

    verb: str  # discovery, list, watch, get, create, update, patch, delete
    rt: ResourceType | None = None
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    discovery: Any = None  # the answer of a discovery call

    @property
    def operation(self) -> str:
        if self.rt is None:
            return "discovery"
        if self.subresource.startswith("proxy/"):
            return f"{self.verb} {self.rt.plural}/proxy"
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
        self.bookmark_interval = BOOKMARK_INTERVAL
        self.watch_history = WATCH_HISTORY
        self.changed = threading.Condition(self.lock)  # a cluster was written to
        # Kubelets run (simulator/kube/scheduler.py): an evicted pod is deleted gracefully.
        self.kubelets = False

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
            reply = self._faulted(fault, lambda: self._answered_unless_reset(state, route, request))
        except StatusError as exc:
            reply = Reply.error(exc)
        if state.removed:
            # Reset (or removed) while the call was delayed: it never acts on what came
            # after, nor enters the new call log; its connection is dropped.
            return Reply(status=0, lost="drop")
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

    def _answered_unless_reset(self, state: ClusterState, route: Route, request: Request) -> Reply:
        if state.removed:
            return Reply(status=0, lost="drop")
        return self._answer(state, route, request)

    def _answer(self, state: ClusterState, route: Route, request: Request) -> Reply:
        if request.headers.get("authorization", "") != f"Bearer {state.token}":
            raise errors.unauthorized()
        if route.rt is None:
            if isinstance(route.discovery, bytes):
                return Reply(200, route.discovery)  # an OpenAPI document, encoded once
            return Reply.json(200, route.discovery)
        rt = route.rt
        if route.verb == "watch":
            return self._watch(state, rt, route.namespace, request)
        body: Any = None
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if route.verb in ("create", "update", "patch"):
            if "protobuf" in content_type or (
                route.verb != "patch" and content_type not in JSON_TYPES
            ):
                raise errors.unsupported_media_type(content_type)
            try:
                body = json.loads(request.body or b"null")
            except ValueError as exc:
                raise errors.bad_request(f"the body of the request is not JSON: {exc}") from exc
        if route.verb == "patch" and content_type not in patches.TYPES:
            raise errors.unsupported_patch(list(patches.TYPES))  # server-side apply among them
        if route.verb == "delete":
            body = _delete_options(request)
        dry_run = _dry_run(request, body if route.verb == "delete" else None)
        acting = route.subresource in POD_ACTIONS
        warnings = [] if acting else _field_validation(rt, route.verb, content_type, body, request)
        with self.lock:
            if route.verb == "list":
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
            elif route.subresource == "scale":
                answer = state.scale(
                    rt, route.namespace, route.name, route.verb, content_type, body,
                    dry_run=dry_run,
                )  # fmt: skip
                status = 200
            elif route.subresource == "binding":
                answer = pods.bind(state, route.namespace, route.name, body, dry_run=dry_run)
                status = 201
            elif route.subresource == "eviction":
                answer = pods.evict(
                    state, route.namespace, route.name, body, dry_run=dry_run,
                    graceful=self.kubelets,
                )  # fmt: skip
                status = 201
            elif route.subresource == "log":
                pod = state.get(rt, route.namespace, route.name)
                text = jobs.log(state, pod, request.param("container") or "")
                return Reply(200, _log_limited(text, request).encode(), content_type="text/plain")
            elif route.subresource.startswith("proxy/"):
                text = _pod_proxied(state, route.namespace, route.name, route.subresource)
                return Reply(200, text.encode(), content_type="text/plain; version=0.0.4")
            elif route.verb == "get":
                answer, status = state.get(rt, route.namespace, route.name), 200
            elif route.verb == "create":
                answer, status = state.create(rt, route.namespace, body, dry_run=dry_run), 201
            elif route.verb == "update":
                answer = state.replace(
                    rt, route.namespace, route.name, body, route.subresource, dry_run=dry_run
                )
                status = 200
            elif route.verb == "patch":
                answer = state.patch(
                    rt, route.namespace, route.name, content_type, body, route.subresource,
                    dry_run=dry_run,
                )  # fmt: skip
                status = 200
            else:
                deleted = state.delete(rt, route.namespace, route.name, dry_run=dry_run)
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
        headers = {"Warning": ", ".join(warnings)} if warnings else {}
        if route.verb in ("list", "get") and _as_table(rt, request):
            answer = tables.table(rt, answer, request.param("includeObject", "Metadata"))
        return Reply.json(status, answer, headers)

    def _watch(
        self, state: ClusterState, rt: ResourceType, namespace: str, request: Request
    ) -> Reply:
        """A watch as the real server streams it: from `resourceVersion` on (none or "0":
        first every current object as ADDED), one JSON event a line, BOOKMARKs when asked
        for, until `timeoutSeconds`. A resourceVersion the history no longer holds is an
        ERROR event carrying 410 Expired, as the watch cache answers it."""
        selects = matcher(
            request.param("labelSelector"), request.param("fieldSelector"), rt.selectable_fields()
        )
        timeout = _whole_number(request, "timeoutSeconds", WATCH_TIMEOUT)
        bookmarks = request.param("allowWatchBookmarks") in ("true", "1")
        start = request.param("resourceVersion")
        initial: list[bytes] = []
        failed: StatusError | None = None
        with self.lock:
            interval = self.bookmark_interval
            if start in ("", "0"):
                since = state.resource_version
                current = state.list(rt, namespace)["items"]
                initial = [
                    _event_line("ADDED", obj) for obj in current if selects is None or selects(obj)
                ]
            else:
                try:
                    since = int(start)
                except ValueError:
                    raise errors.bad_request(f"invalid resource version: {start!r}") from None
                try:
                    state.events_since(since)
                except StatusError as exc:
                    failed = exc

        def events() -> Iterator[bytes]:
            yield from initial
            if failed is not None:
                yield _event_line("ERROR", failed.status())
                return
            last = since
            now = time.monotonic()
            deadline, next_bookmark = now + timeout, now + interval
            while True:
                expired: StatusError | None = None
                with self.changed:  # never yield while holding the lock
                    if state.removed:
                        return
                    try:
                        found = state.events_since(last)
                        if not found:
                            wait = min(deadline, next_bookmark if bookmarks else deadline)
                            self.changed.wait(max(0.0, min(wait - time.monotonic(), 1.0)))
                            found = [] if state.removed else state.events_since(last)
                    except StatusError as exc:
                        expired = exc
                    current = state.resource_version
                if expired is not None:
                    yield _event_line("ERROR", expired.status())
                    return
                for event in found:
                    line = _event_for(event, rt, namespace, selects)
                    if line is not None:
                        yield line
                    last = event.resource_version
                now = time.monotonic()
                if bookmarks and now >= next_bookmark:
                    last = max(last, current)
                    mark = {"kind": rt.kind, "apiVersion": rt.api_version,
                            "metadata": {"resourceVersion": str(last)}}  # fmt: skip
                    yield _event_line("BOOKMARK", mark)
                    next_bookmark = now + interval
                if now >= deadline:
                    return

        if _as_table(rt, request):
            include = request.param("includeObject", "Metadata")
            return Reply(200, stream=tables.watch_events(rt, events(), include))
        return Reply(200, stream=events())

    # ---- control API ---------------------------------------------------------------------

    def control(self, request: Request) -> Any:
        parts = request.path[len("/_sim/") :].strip("/").split("/")
        method = request.method
        try:
            body = json.loads(request.body) if request.body else None
        except ValueError as exc:
            raise ControlError(400, f"the body is not JSON: {exc}") from exc
        if parts == ["reset"] and method == "POST":
            for state in self.clusters.values():
                state.removed = True
            self.changed.notify_all()  # their watches end
            self.clusters.clear()
            self.faults = FaultPlan(self.seed)
            self.calls = []
            self.continue_ttl = 300.0
            self.bookmark_interval = BOOKMARK_INTERVAL
            self.watch_history = WATCH_HISTORY
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
                self._configure(body or {})
            if method in ("GET", "POST"):
                return {
                    "continue_ttl_seconds": self.continue_ttl,
                    "bookmark_interval_seconds": self.bookmark_interval,
                    "watch_history": self.watch_history,
                }
        raise ControlError(404, f"no control call {method} {request.path}")

    def _configure(self, body: dict[str, Any]) -> None:
        def number(name: str, least: float) -> float | None:
            value = body.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < least
            ):
                raise ControlError(400, f"{name} must be a number >= {least:g}")
            return None if value is None else float(value)

        ttl, interval = number("continue_ttl_seconds", 0), number("bookmark_interval_seconds", 0.1)
        history = number("watch_history", 1)
        if ttl is not None:
            self.continue_ttl = ttl
        if interval is not None:
            self.bookmark_interval = interval
        if history is not None:
            self.watch_history = int(history)
        for state in self.clusters.values():
            state.continue_ttl, state.history_size = self.continue_ttl, self.watch_history

    def _cluster_add(self, body: dict[str, Any], host: str) -> dict[str, Any]:
        name = body.get("name")
        if not isinstance(name, str) or not name or "/" in name:
            raise ControlError(400, '"name" is required (no "/")')
        if name in self.clusters:
            raise ControlError(409, f"cluster {name} exists")
        state = ClusterState(name, str(body.get("token") or secrets.token_urlsafe(24)))
        state.continue_ttl = self.continue_ttl
        state.history_size = self.watch_history
        state.changed = self.changed
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
            state.removed = True
            self.changed.notify_all()  # its watches end
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
        if rest == ["dcgm"] and method == "POST":
            try:
                state.dcgm = dcgm_nodes(body)
            except DcgmSpecError as exc:
                raise ControlError(400, str(exc)) from exc
            return {"nodes": sorted(state.dcgm)}
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


def _as_table(rt: ResourceType, request: Request) -> bool:
    """A Table asked for (`kubectl get`) of a kind whose columns the simulator prints."""
    return tables.served(rt) and tables.wanted(request.headers.get("accept", ""))


def _accepts_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    types = [part.split(";")[0].strip().lower() for part in accept.split(",") if part.strip()]
    return not types or any(t in ("application/json", "*/*", "application/*") for t in types)


def _field_validation(
    rt: ResourceType, verb: str, content_type: str, body: Any, request: Request
) -> list[str]:
    """`fieldValidation` as the real server does it on what is written: Strict refuses
    fields the kind's schema does not declare (400), Warn (the default) answers them as
    `Warning` headers, Ignore says nothing. A JSON patch is not checked."""
    directive = request.param("fieldValidation") or "Warn"
    if directive not in ("Strict", "Warn", "Ignore"):
        raise errors.bad_request(
            f'fieldValidation parameter unsupported: "{directive}": supported values: '
            '"Ignore", "Warn", "Strict"'
        )
    if directive == "Ignore" or verb not in ("create", "update", "patch"):
        return []
    if verb == "patch" and content_type == patches.JSON_PATCH:
        return []
    unknown = openapi.unknown_fields(rt, body)
    if not unknown:
        return []
    problems = [f'unknown field "{field}"' for field in unknown]
    if directive == "Strict":
        raise errors.bad_request("strict decoding error: " + ", ".join(problems))
    return ['299 - "' + problem.replace('"', '\\"') + '"' for problem in problems]


def _delete_options(request: Request) -> dict[str, Any]:
    """The DeleteOptions a delete may carry in its body (kubectl sends dryRun there)."""
    if not request.body:
        return {}
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in JSON_TYPES:
        raise errors.unsupported_media_type(content_type)
    try:
        options = json.loads(request.body)
    except ValueError as exc:
        raise errors.bad_request(f"the body of the request is not JSON: {exc}") from exc
    return options if isinstance(options, dict) else {}


def _dry_run(request: Request, options: dict[str, Any] | None = None) -> bool:
    values = [value for value in request.query.get("dryRun", []) if value]
    values += [str(value) for value in (options or {}).get("dryRun") or []]
    for value in values:
        if value != "All":
            raise errors.bad_request(f'Invalid dry run value: "{value}": supported values: "All"')
    return bool(values)


def _whole_number(request: Request, name: str, default: int) -> int:
    text = request.param(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f"{name} must be an integer: {text!r}") from None
    if value < 0:
        raise errors.bad_request(f"{name} must not be negative: {value}")
    return value


def _event_line(kind: str, obj: Any) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _event_for(
    event: Event, rt: ResourceType, namespace: str, selects: Matcher | None
) -> bytes | None:
    """The event a watch of `rt` (in `namespace`, with its selectors) sees of a write: an
    object that leaves the selection is DELETED, one that enters it ADDED."""
    if event.storage_key != rt.storage_key or (namespace and event.key[0] != namespace):
        return None
    was = event.old is not None and (selects is None or selects(event.old))
    now = event.new is not None and (selects is None or selects(event.new))
    if now and event.new is not None:
        return _event_line("MODIFIED" if was else "ADDED", as_version(event.new, rt))
    gone = event.new if event.new is not None else event.old
    if was and gone is not None:
        return _event_line("DELETED", as_version(gone, rt))
    return None


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
            watch = request.param("watch") in ("true", "1")
            return Route("watch" if watch else "list", rt, namespace)
        if method == "POST" and (namespace or not rt.namespaced):
            return Route("create", rt, namespace)
        raise errors.method_not_allowed(method, rt)
    if len(rest) == 2:
        verb = _ITEM_VERBS.get(method)
        if verb is None:
            raise errors.method_not_allowed(method, rt)
        return Route(verb, rt, namespace, rest[1])
    if len(rest) == 3 and method == "GET" and rest[2] == "log" and rt == PODS:
        return Route("get", rt, namespace, rest[1], "log")
    if len(rest) >= 3 and method == "GET" and rest[2] == "proxy" and rt == PODS:
        # `[<scheme>:]<pod>[:<port>]/proxy/<path>`: the path is the pod's server's.
        target = rest[1].split(":")
        name = target[1] if len(target) > 1 and target[0] in ("http", "https") else target[0]
        return Route("get", rt, namespace, name, "proxy/" + "/".join(rest[3:]))
    if len(rest) == 3 and method == "POST" and rest[2] in {a[0] for a in rt.actions}:
        return Route("create", rt, namespace, rest[1], rest[2])
    if len(rest) == 3 and (
        (rest[2] == "status" and rt.status_subresource) or (rest[2] == "scale" and rt.scale)
    ):
        verb = _SUBRESOURCE_VERBS.get(method)
        if verb is None:
            raise errors.method_not_allowed(method, rt)
        return Route(verb, rt, namespace, rest[1], rest[2])
    raise StatusError(404, "the server could not find the requested resource")


def _pod_proxied(state: ClusterState, namespace: str, name: str, subresource: str) -> str:
    """What a pod's server answers through the proxy: a dcgm-exporter's metrics, for the
    GPUs of the node it runs on; anything else is not listening (as the real proxy says
    it, 503)."""
    pod = state.get(PODS, namespace, name)
    node = (pod.get("spec") or {}).get("nodeName") or ""
    exporter = state.dcgm.get(node)
    running = (pod.get("status") or {}).get("phase") == "Running"
    if subresource != "proxy/metrics" or exporter is None or not running:
        raise StatusError(
            503,
            f"error trying to reach service: dial tcp {name}:9400: connect: connection refused",
            reason="ServiceUnavailable",
        )
    return exporter.scrape(node)


def _log_limited(text: str, request: Request) -> str:
    """A log as `tailLines` and `limitBytes` ask for it."""
    tail = request.param("tailLines")
    if tail and tail.isdigit():
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-int(tail) :]) if int(tail) else ""
    limit = request.param("limitBytes")
    if limit and limit.isdigit():
        text = text.encode()[: int(limit)].decode(errors="ignore")
    return text


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
    if parts == ["openapi", "v2"]:
        if not _accepts_json(request):
            # What a server without the protobuf encoding answers (kube-openapi's handler).
            raise StatusError(406, "only application/json is served", reason="NotAcceptable")
        return openapi.v2(GIT_VERSION)
    if parts == ["openapi", "v3"]:
        return openapi.v3_index(CLUSTER_PREFIX + state.name, GIT_VERSION)
    if parts[:2] == ["openapi", "v3"]:
        found = openapi.v3("/".join(parts[2:]), GIT_VERSION)
        if found is None:
            raise StatusError(404, "the server could not find the requested resource")
        return found
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

    def __init__(self, address: tuple[str, int], simulator: Simulator, tls: ssl.SSLContext) -> None:
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
        if reply.stream is not None:
            self._stream(reply)
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

    def _stream(self, reply: Reply) -> None:
        assert reply.stream is not None
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            for chunk in reply.stream:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away
        self.close_connection = True

    do_GET = _serve
    do_POST = _serve
    do_PUT = _serve
    do_PATCH = _serve
    do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the call log (GET /_sim/calls) is the record
