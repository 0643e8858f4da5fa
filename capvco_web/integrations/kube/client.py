"""KubeClient: typed reads of one cluster's API, through the official `kubernetes` client.

Built from the cluster's kubeconfig (a dict, never `~/.kube` nor the process-wide
default configuration), with a (connect, read) timeout on every call and no retries of
its own: the periodic tasks are the retry, and a listing that failed says so. All calls
go through `KubeClient._send`, which turns every failure into an error of `errors.py`.

Listings are read in pages (`limit` + `continue`) and their JSON is read as is
(`_preload_content=False`): the client's own models refuse any object that lacks a field
they require, and building them costs more than the request. Writes (a node's labels,
the GPU add-on's DaemonSet) send and read plain JSON too (`_request`): the typed
methods would validate our bodies against the client's models first.

The credential goes only where `allowed_servers` (KUBE_ALLOWED_HOSTS) allows: `_send`
refuses a server outside it before anything is sent, and every connection resolves the
name itself and connects only to an address it checked (`_checked_socket`), so a name that
resolves to an address the list does not allow (DNS rebinding included) is never
connected to. No redirect is followed, and no proxy is used: not a kubeconfig's
`proxy-url` (refused when it is read) nor HTTPS_PROXY and the like from the environment.
A failure's message is the Kubernetes Status message of the answer (its first line,
bounded) or the standard phrase of its status, never the rest of the body: a server that
is not a Kubernetes API server may answer anything, and the message is shown to viewers.
"""

from __future__ import annotations

import base64
import functools
import http
import json
import logging
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import kubernetes.watch
import urllib3.connection
import urllib3.exceptions
import urllib3.util
import urllib3.util.connection
from kubernetes.client import ApiClient, BatchV1Api, Configuration, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import new_client_from_config_dict

from .errors import (
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    KubeError,
    NotFound,
    ServerError,
    ServerNotAllowed,
    Timeout,
    TooManyRequests,
    Unauthorized,
    UnexpectedResponse,
    Unreachable,
)
from .kubeconfig import Kubeconfig, KubeconfigInvalid, kubeconfig_check
from .servers import AllowedServers
from .types import (
    Job,
    Listing,
    Node,
    Pod,
    PodRun,
    Service,
    WatchEvent,
    parse_job,
    parse_node,
    parse_pod,
    parse_pod_run,
    parse_service,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
TimeoutPair = tuple[float, float]

DEFAULT_TIMEOUT: TimeoutPair = (5.0, 30.0)
DEFAULT_PAGE_SIZE = 500
MAX_PAGES = 10_000
_MAX_MESSAGE = 300
MERGE_PATCH = "application/merge-patch+json"
PROXY_LIMIT_BYTES = 4 * 1024 * 1024  # an exporter of 8 GPUs answers some 100 KiB
Json = Mapping[str, Any]


class KubeClient:
    """One cluster's API server, as its kubeconfig reaches it."""

    def __init__(
        self,
        *,
        kubeconfig: Kubeconfig,
        allowed_servers: AllowedServers,
        timeout: TimeoutPair = DEFAULT_TIMEOUT,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.server = kubeconfig.server
        self.allowed_servers = allowed_servers
        self.timeout = timeout
        self.page_size = page_size
        self._api = _api_client(kubeconfig, allowed_servers)
        self._core = CoreV1Api(self._api)
        self._custom = CustomObjectsApi(self._api)
        self._batch = BatchV1Api(self._api)

    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        allowed_servers: AllowedServers,
        insecure_allowed: bool = False,
        **options: Any,
    ) -> KubeClient:
        """A client from a kubeconfig as stored (YAML); raises KubeconfigInvalid, also
        when its server is not one `allowed_servers` allows, or when it skips the check of
        the server's certificate and that is not `insecure_allowed`."""
        return cls(
            kubeconfig=kubeconfig_check(text, allowed_servers, insecure_allowed=insecure_allowed),
            allowed_servers=allowed_servers,
            **options,
        )

    def __repr__(self) -> str:
        return f"KubeClient(server={self.server!r})"

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- listings -------------------------------------------------------------------------

    def list_nodes(self) -> Listing[Node]:
        return self._list(
            "list nodes",
            lambda token: self._core.list_node(
                limit=self.page_size,
                _continue=token,
                _preload_content=False,
                _request_timeout=self.timeout,
            ),
            parse_node,
        )

    def list_pods(self, *, node_name: str = "") -> Listing[Pod]:
        """The pods of every namespace; with `node_name`, those bound to that node only."""
        selector = f"spec.nodeName={node_name}" if node_name else None
        return self._list(
            "list pods",
            lambda token: self._core.list_pod_for_all_namespaces(
                limit=self.page_size,
                _continue=token,
                field_selector=selector,
                _preload_content=False,
                _request_timeout=self.timeout,
            ),
            parse_pod,
        )

    def list_custom_objects(
        self, *, group: str, version: str, plural: str
    ) -> Listing[Mapping[str, Any]]:
        """Objects of a custom kind, of every namespace, as the API answers them."""
        return self._list(
            f"list {plural}.{group}",
            lambda token: self._custom.list_cluster_custom_object(
                group,
                version,
                plural,
                limit=self.page_size,
                _continue=token,
                _preload_content=False,
                _request_timeout=self.timeout,
            ),
            _as_mapping,
        )

    def list_jobs(self, *, namespace: str, label_selector: str) -> Listing[Job]:
        return self._list(
            f"list jobs of {namespace}",
            lambda token: self._batch.list_namespaced_job(
                namespace,
                label_selector=label_selector,
                limit=self.page_size,
                _continue=token,
                _preload_content=False,
                _request_timeout=self.timeout,
            ),
            parse_job,
        )

    def list_pod_runs(self, *, namespace: str, label_selector: str) -> Listing[PodRun]:
        """The pods of one namespace that the selector picks, each as a run (`PodRun`)."""
        return self._list(
            f"list pods of {namespace}",
            lambda token: self._core.list_namespaced_pod(
                namespace,
                label_selector=label_selector,
                limit=self.page_size,
                _continue=token,
                _preload_content=False,
                _request_timeout=self.timeout,
            ),
            parse_pod_run,
        )

    def list_services(self, *, label_selector: str) -> Listing[Service]:
        """The Services of every namespace that the selector picks."""
        return self._list(
            "list services",
            lambda token: self._core.list_service_for_all_namespaces(
                label_selector=label_selector,
                limit=self.page_size,
                _continue=token,
                _preload_content=False,
                _request_timeout=self.timeout,
            ),
            parse_service,
        )

    # --- watches ------------------------------------------------------------------------

    def watch_nodes(self, *, resource_version: str, timeout_seconds: int) -> WatchStream[Node]:
        """The changes of nodes after `resource_version` (of a listing, or of the last
        event or bookmark), with bookmarks, for at most `timeout_seconds`."""
        return self._watch(
            "watch nodes", self._core.list_node, parse_node, resource_version, timeout_seconds
        )

    def watch_pods(self, *, resource_version: str, timeout_seconds: int) -> WatchStream[Pod]:
        """The same, for the pods of every namespace."""
        return self._watch(
            "watch pods",
            self._core.list_pod_for_all_namespaces,
            parse_pod,
            resource_version,
            timeout_seconds,
        )

    def _watch(
        self,
        operation: str,
        func: Callable[..., Any],
        parse: Callable[[Mapping[str, Any]], T],
        resource_version: str,
        timeout_seconds: int,
    ) -> WatchStream[T]:
        self._allowed(operation)
        watch = _JsonWatch()  # type: ignore[no-untyped-call]
        events = watch.stream(  # type: ignore[no-untyped-call]
            func,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            # A quiet watch sends nothing until a bookmark or its end: the read timeout
            # waits that long, and a read timeout more for the server to end it.
            _request_timeout=(self.timeout[0], timeout_seconds + self.timeout[1]),
        )
        return WatchStream(operation, events, watch, parse)

    # --- writes --------------------------------------------------------------------------

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> Node:
        """Set labels of a node (None removes one) with one merge patch; answers the node
        as it is after the patch. A patch that sets what is there changes nothing."""
        body = {"metadata": {"labels": dict(labels)}}
        answer = self._send(
            f"patch node {name}",
            lambda: self._request(
                "PATCH", f"/api/v1/nodes/{_segment(name)}", body=body, content_type=MERGE_PATCH
            ),
        )
        return parse_node(answer)

    def cordon_node(self, name: str, *, unschedulable: bool = True) -> Node:
        """Cordon a node (or uncordon it, `unschedulable=False`), as `kubectl cordon` does:
        one merge patch of spec.unschedulable; answers the node as it is after."""
        body = {"spec": {"unschedulable": True if unschedulable else None}}
        answer = self._send(
            f"{'cordon' if unschedulable else 'uncordon'} node {name}",
            lambda: self._request(
                "PATCH", f"/api/v1/nodes/{_segment(name)}", body=body, content_type=MERGE_PATCH
            ),
        )
        return parse_node(answer)

    def evict_pod(self, *, namespace: str, name: str) -> None:
        """Ask for a pod's eviction through the Eviction API, which honours its
        PodDisruptionBudgets: TooManyRequests (429) when a budget does not allow it now
        (wait and ask again, never delete), NotFound when the pod is gone already."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        path = f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}/eviction"
        self._send(f"evict pod {namespace}/{name}", lambda: self._request("POST", path, body=body))

    def read_daemonset(self, namespace: str, name: str) -> Json | None:
        """The DaemonSet as the API answers it; None when there is none of that name."""
        try:
            return self._send(
                f"read daemonset {namespace}/{name}",
                lambda: self._request("GET", _daemonset_path(namespace, name)),
            )
        except NotFound:
            return None

    def create_daemonset(self, namespace: str, body: Json) -> Json:
        """Raises Conflict (`AlreadyExists`) when one of that name exists."""
        name = str(body["metadata"]["name"])
        return self._send(
            f"create daemonset {namespace}/{name}",
            lambda: self._request("POST", _daemonset_path(namespace), body=body),
        )

    def replace_daemonset(self, namespace: str, name: str, body: Json) -> Json:
        """Replace it whole. With `metadata.resourceVersion` in the body, raises Conflict
        when it changed since it was read."""
        return self._send(
            f"replace daemonset {namespace}/{name}",
            lambda: self._request("PUT", _daemonset_path(namespace, name), body=body),
        )

    def delete_daemonset(self, namespace: str, name: str) -> None:
        """Raises NotFound when there is none of that name."""
        self._send(
            f"delete daemonset {namespace}/{name}",
            lambda: self._request("DELETE", _daemonset_path(namespace, name)),
        )

    def create_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """Raises Conflict (`AlreadyExists`) when there is one of that name."""
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": dict(labels)},
        }
        self._send(
            f"create namespace {name}",
            lambda: self._request("POST", "/api/v1/namespaces", body=body),
        )

    def create_job(self, namespace: str, body: Json) -> Json:
        """Raises Conflict (`AlreadyExists`) when one of that name exists."""
        name = str(body["metadata"]["name"])
        return self._send(
            f"create job {namespace}/{name}",
            lambda: self._request(
                "POST", _namespaced_path("batch/v1", namespace, "jobs"), body=body
            ),
        )

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete it and, in the background, its pods (a Job deleted alone leaves them, in
        the API's default for batch/v1); raises NotFound when there is none of that name."""
        path = f"{_namespaced_path('batch/v1', namespace, 'jobs')}/{_segment(name)}"
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        self._send(
            f"delete job {namespace}/{name}", lambda: self._request("DELETE", path, body=options)
        )

    def read_pod_log(self, *, namespace: str, name: str, container: str, limit_bytes: int) -> str:
        """A container's log as text, at most `limit_bytes` of it; NotFound when there is no
        such pod."""
        operation = f"read log of pod {namespace}/{name}"
        self._allowed(operation)
        try:
            # Raw (`_preload_content=False`): the text as the kubelet wrote it.
            response: Any = self._core.read_namespaced_pod_log(
                name,
                namespace,
                container=container or None,
                limit_bytes=limit_bytes,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
            body = response.data
        except _CALL_FAILURES as exc:
            raise _call_error(operation, exc) from exc
        return bytes(body).decode("utf-8", errors="replace")

    def read_pod_proxied(self, *, namespace: str, name: str, port: int, path: str) -> str:
        """What a pod's own server answers on `path`, through the API server's pod proxy
        (`pods/<name>:<port>/proxy/<path>`), as text; at most PROXY_LIMIT_BYTES of it."""
        operation = f"read {path} of pod {namespace}/{name}"
        self._allowed(operation)
        target = f"{_segment(name)}:{port}" if port else _segment(name)
        resource = f"{_namespaced_path('v1', namespace, 'pods')}/{target}/proxy/{path}"
        try:
            body = self._request("GET", resource, accept="text/plain").data
        except _CALL_FAILURES as exc:
            raise _call_error(operation, exc) from exc
        if len(body) > PROXY_LIMIT_BYTES:
            raise UnexpectedResponse(
                f"an answer over {PROXY_LIMIT_BYTES} bytes", operation=operation
            )
        return bytes(body).decode("utf-8", errors="replace")

    def apply(self, obj: Json) -> None:
        """Create a namespaced object, or replace it whole when one of that name exists
        (any kind: its path from its apiVersion and `plural_of` its kind)."""
        kind = str(obj.get("kind") or "")
        meta = _as_mapping(obj.get("metadata") or {})
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        if not kind or not name or not namespace:
            raise BadRequest("an object without a kind, name and namespace")
        path = _namespaced_path(str(obj.get("apiVersion") or "v1"), namespace, plural_of(kind))
        try:
            self._send(
                f"create {kind} {namespace}/{name}",
                lambda: self._request("POST", path, body=obj),
            )
        except Conflict:
            self._send(
                f"replace {kind} {namespace}/{name}",
                lambda: self._request("PUT", f"{path}/{_segment(name)}", body=obj),
            )

    # --- single objects -------------------------------------------------------------------

    def get_pod(self, *, namespace: str, name: str) -> Pod:
        """One pod as the API server has it now; NotFound when there is none."""
        return parse_pod(
            self._send(
                f"get pod {namespace}/{name}",
                lambda: self._request(
                    "GET", f"{_namespaced_path('v1', namespace, 'pods')}/{_segment(name)}"
                ),
            )
        )

    def get_secret_data(self, *, namespace: str, name: str) -> dict[str, str]:
        """A Secret's keys and values, decoded from `data` (an API server never answers
        the write-only `stringData`); NotFound when there is none."""
        answer = self._send(
            f"get secret {namespace}/{name}",
            lambda: self._request(
                "GET", f"{_namespaced_path('v1', namespace, 'secrets')}/{_segment(name)}"
            ),
        )
        found: dict[str, str] = {}
        for key, value in _as_mapping(answer.get("data") or {}).items():
            try:
                found[str(key)] = base64.b64decode(str(value), validate=True).decode()
            except (ValueError, UnicodeDecodeError) as exc:
                raise UnexpectedResponse(
                    f"secret {namespace}/{name}: {key} is not base64 text",
                    operation="get secret",
                ) from exc
        return found

    def get_node(self, *, name: str) -> Node:
        """One node as the API server has it now; NotFound when there is none."""
        return parse_node(
            self._send(
                f"get node {name}", lambda: self._request("GET", f"/api/v1/nodes/{_segment(name)}")
            )
        )

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Json | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Any:
        """One call with a JSON body (or none), answered as the raw response; a status
        other than 2xx raises ApiException as the typed methods do."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self._api.param_serialize(
            method=method,
            resource_path=path,
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*request, _request_timeout=self.timeout)
        response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def _list(
        self,
        operation: str,
        fetch: Callable[[str | None], Any],
        parse: Callable[[Mapping[str, Any]], T],
    ) -> Listing[T]:
        """Every page of a listing; a failure on any page ends it, incomplete."""
        items: list[T] = []
        token: str | None = None
        version = ""
        calls = 0

        def ended(error: KubeError | None) -> Listing[T]:
            return Listing(tuple(items), error is None, error, version, calls)

        while True:
            calls += 1
            try:
                page = self._send(operation, functools.partial(fetch, token))
                metadata = _as_mapping(page.get("metadata") or {})
                found = [parse(_as_mapping(raw)) for raw in _as_list(page.get("items") or [])]
            except KubeError as exc:
                return ended(exc)
            except (TypeError, ValueError, AttributeError) as exc:  # a field of another shape
                return ended(
                    UnexpectedResponse(
                        f"an item that cannot be read ({type(exc).__name__})", operation=operation
                    )
                )
            items.extend(found)
            version = version or str(metadata.get("resourceVersion") or "")
            token = str(metadata.get("continue") or "") or None
            if token is None:
                return ended(None)
            if calls >= MAX_PAGES:
                return ended(
                    UnexpectedResponse(f"more than {MAX_PAGES} pages", operation=operation)
                )

    # --- the one place where calls are made ---------------------------------------------

    def _send(self, operation: str, call: Callable[[], Any]) -> dict[str, Any]:
        """Make one call and read its JSON answer; every failure becomes a KubeError.
        Nothing is sent to a server the allow-list refuses."""
        self._allowed(operation)
        try:
            response = call()
            body = response.data
        except _CALL_FAILURES as exc:
            raise _call_error(operation, exc) from exc
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise UnexpectedResponse("an answer that is not JSON", operation=operation) from exc
        if not isinstance(payload, dict):
            raise UnexpectedResponse("an answer that is not a JSON object", operation=operation)
        return payload

    def _allowed(self, operation: str) -> None:
        if refusal := self.allowed_servers.refusal(self.server):
            raise ServerNotAllowed(f"credential not sent: {refusal}", operation=operation)


class WatchStream(Generic[T]):
    """One watch request, read event by event (`kubernetes.watch.Watch` reads the lines);
    it ends when the server ends it (`timeout_seconds`), or raises a KubeError: Expired
    when the resourceVersion is too old (an HTTP 410, or an ERROR event carrying 410).
    `stop()`, from any thread, ends it at once, without an error."""

    def __init__(
        self,
        operation: str,
        events: Iterator[dict[str, Any]],
        watch: kubernetes.watch.Watch,
        parse: Callable[[Mapping[str, Any]], T],
    ) -> None:
        self.operation = operation
        self._events = events
        self._watch = watch
        self._parse = parse
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()  # type: ignore[no-untyped-call]

    def __iter__(self) -> Iterator[WatchEvent[T]]:
        try:
            for raw in self._events:
                if self._stopped:
                    return
                yield self._event(raw)
        except _CALL_FAILURES as exc:
            if self._stopped:
                return  # the connection was shut under the read: that is what stop does
            raise _call_error(self.operation, exc) from exc
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UnexpectedResponse(
                f"an event that cannot be read ({type(exc).__name__})", operation=self.operation
            ) from exc
        finally:
            self._watch.stop()  # type: ignore[no-untyped-call]
            close = getattr(self._events, "close", None)
            if close is not None:
                close()  # the response released, also when the reader left early

    def _event(self, raw: Mapping[str, Any]) -> WatchEvent[T]:
        kind = str(raw.get("type") or "")
        obj = _as_mapping(raw.get("raw_object"))
        version = str(_as_mapping(obj.get("metadata") or {}).get("resourceVersion") or "")
        if not version:
            raise UnexpectedResponse("an event without a resourceVersion", operation=self.operation)
        if kind == "BOOKMARK":
            return WatchEvent(kind, None, version)
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            raise UnexpectedResponse(f"an event of type {kind[:20]!r}", operation=self.operation)
        return WatchEvent(kind, self._parse(obj), version)


class _JsonWatch(kubernetes.watch.Watch):
    """The official watch, reading each event's object as JSON (no model: as listings)."""

    def get_return_type(self, func: Any) -> Any:
        return None


def _segment(name: str) -> str:
    return quote(name, safe="")


def plural_of(kind: str) -> str:
    """The resource name of a kind, as the API serves it (`Secret` → `secrets`)."""
    if kind == "NetworkAttachmentDefinition":  # Multus' CRD names it with dashes
        return "network-attachment-definitions"
    return kind.lower() + "s"


def _namespaced_path(api_version: str, namespace: str, plural: str) -> str:
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{root}/namespaces/{_segment(namespace)}/{plural}"


def _daemonset_path(namespace: str, name: str = "") -> str:
    path = f"/apis/apps/v1/namespaces/{_segment(namespace)}/daemonsets"
    return f"{path}/{_segment(name)}" if name else path


def _as_mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise UnexpectedResponse(f"a list item that is {type(value).__name__}, not an object")
    return value


def _as_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise UnexpectedResponse(f"items that are {type(value).__name__}, not a list")
    return value


def _api_client(kubeconfig: Kubeconfig, allowed_servers: AllowedServers) -> ApiClient:
    # A configuration of its own: the loader would otherwise fill (and the process keep)
    # the default one. Only a read on a dropped connection is retried (_DroppedRetry).
    # No proxy: setting it (to none) stops the configuration reading HTTPS_PROXY and the
    # like from the environment.
    configuration = Configuration()
    configuration.retries = _DroppedRetry(
        total=1, connect=0, read=1, redirect=0, status=0, other=0, backoff_factor=0,
        allowed_methods=frozenset({"GET", "HEAD"}), raise_on_redirect=False,
        respect_retry_after_header=False,
    )  # fmt: skip
    configuration.proxy = None
    configuration.no_proxy = None
    try:
        client: ApiClient = new_client_from_config_dict(  # type: ignore[no-untyped-call]
            config_dict=kubeconfig.config,
            persist_config=False,
            client_configuration=configuration,
        )
    except (ConfigException, ValueError, TypeError, AttributeError) as exc:
        # What kubeconfig_load lets through should load; a message, not a crash, if not.
        raise KubeconfigInvalid(f"The kubeconfig cannot be used ({type(exc).__name__}).") from exc
    rest = client.rest_client
    given = rest.pool_manager
    if type(given) is not urllib3.PoolManager:  # a proxy's, SOCKS or HTTP: never ours
        client.close()  # type: ignore[no-untyped-call]
        raise KubeconfigInvalid("The kubeconfig cannot be used: it names a proxy.")
    rest.pool_manager = _CheckedPoolManager(
        allowed_servers, headers=given.headers, **given.connection_pool_kw
    )
    given.clear()
    return client


class _DroppedRetry(urllib3.util.Retry):
    """A read whose connection broke before any answer, once, on a new connection: a
    pooled connection dropped while idle (a load balancer's or a NAT's idle timeout, the
    server restarted) is found out only by sending on it. Nothing else is retried: not a
    write (it may have landed), not a timeout (it costs one read timeout, not two), not a
    new connection that fails; a redirect is answered, never followed."""

    def _is_read_error(self, err: Exception) -> bool:
        cause = err.args[1] if isinstance(err, urllib3.exceptions.ProtocolError) else None
        # RemoteDisconnected is a ConnectionResetError; an answer that is not HTTP, or one
        # cut short, is not "no answer".
        return isinstance(cause, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError))


class _AddressNotAllowed(urllib3.exceptions.NewConnectionError):
    """No connection was made: the server's name resolves only to addresses the
    allow-list refuses."""

    def __init__(self, conn: urllib3.connection.HTTPConnection, refusal: str) -> None:
        super().__init__(conn, refusal)
        self.refusal = refusal


def _checked_socket(
    conn: urllib3.connection.HTTPConnection, allowed_servers: AllowedServers
) -> socket.socket:
    """A socket connected to an address of the server's name that the allow-list allows:
    the name is resolved here once, and the address checked is the one connected to (as
    urllib3's own `_new_conn` does, but for the check). The origin is checked again as
    urllib3 read it from the URL, whatever another parser made of it."""
    scheme = "https" if isinstance(conn, urllib3.connection.HTTPSConnection) else "http"
    host = f"[{conn.host}]" if ":" in conn.host else conn.host
    if refusal := allowed_servers.refusal(f"{scheme}://{host}:{conn.port}"):
        raise _AddressNotAllowed(conn, f"not connected to {conn.host}: {refusal}")
    try:
        found = socket.getaddrinfo(conn._dns_host, conn.port, 0, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise urllib3.exceptions.NameResolutionError(conn.host, conn, exc) from exc
    refusals: list[str] = []
    failure: OSError | None = None
    for *_, address in found:
        ip, port = str(address[0]), int(address[1])
        if refusal := allowed_servers.address_refusal(ip, port):
            refusals.append(refusal)
            continue
        try:
            return urllib3.util.connection.create_connection(
                (ip, port),
                conn.timeout,
                source_address=conn.source_address,
                socket_options=conn.socket_options,
            )
        except TimeoutError as exc:
            raise urllib3.exceptions.ConnectTimeoutError(
                conn, f"Connection to {conn.host} timed out. (connect timeout={conn.timeout})"
            ) from exc
        except OSError as exc:
            failure = exc
    if failure is not None:
        raise urllib3.exceptions.NewConnectionError(
            conn, f"Failed to establish a new connection: {failure}"
        ) from failure
    raise _AddressNotAllowed(conn, f"not connected to {conn.host}: {refusals[0]}")


class _CheckedHTTPConnection(urllib3.connection.HTTPConnection):
    def __init__(self, *args: Any, allowed_servers: AllowedServers, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed_servers = allowed_servers

    def _new_conn(self) -> socket.socket:
        return _checked_socket(self, self.allowed_servers)


class _CheckedHTTPSConnection(urllib3.connection.HTTPSConnection):
    # TLS is set up on the socket afterwards, against the server's name (or its
    # tls-server-name), as for any other.
    def __init__(self, *args: Any, allowed_servers: AllowedServers, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed_servers = allowed_servers

    def _new_conn(self) -> socket.socket:
        return _checked_socket(self, self.allowed_servers)


_CHECKED_CONNECTIONS: dict[str, type[urllib3.connection.HTTPConnection]] = {
    "http": _CheckedHTTPConnection,
    "https": _CheckedHTTPSConnection,
}


class _CheckedPoolManager(urllib3.PoolManager):
    """urllib3's pool manager whose connections check the address they connect to, and
    that follows no redirect (the answer is returned as it is, and refused as not 2xx)."""

    def __init__(self, allowed_servers: AllowedServers, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.allowed_servers = allowed_servers

    def _new_pool(
        self,
        scheme: str,
        host: str,
        port: int,
        request_context: dict[str, Any] | None = None,
    ) -> Any:
        pool = super()._new_pool(scheme, host, port, request_context)
        pool.ConnectionCls = _CHECKED_CONNECTIONS[scheme]
        pool.conn_kw["allowed_servers"] = self.allowed_servers
        return pool

    def urlopen(  # type: ignore[override]
        self, method: str, url: str, redirect: bool = True, **kw: Any
    ) -> Any:
        return super().urlopen(method, url, redirect=False, **kw)


_CALL_FAILURES = (ApiException, urllib3.exceptions.HTTPError, OSError)


def _call_error(operation: str, exc: BaseException) -> KubeError:
    """The KubeError of a call that failed with `exc` (one of _CALL_FAILURES)."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason  # what failed, retried or not (_DroppedRetry)
        if isinstance(exc, urllib3.exceptions.SSLError):  # as the official client says it
            exc = ApiException(status=0, reason=f"{type(exc).__name__}\n{exc}")
    if isinstance(exc, ApiException):
        return _api_error(operation, exc)
    if isinstance(exc, _AddressNotAllowed):
        return ServerNotAllowed(exc.refusal, operation=operation)
    if isinstance(exc, urllib3.exceptions.NewConnectionError):  # refused, or no such host
        return Unreachable(f"{type(exc).__name__}: {exc}", operation=operation)
    if isinstance(exc, urllib3.exceptions.TimeoutError):
        return Timeout(f"no answer in time ({exc})", operation=operation)
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        # Its text may quote what the server sent (a status line that is not HTTP's).
        cause = exc.args[1] if len(exc.args) > 1 else exc
        return Unreachable(
            f"the connection broke or the answer is not HTTP ({type(cause).__name__})",
            operation=operation,
        )
    return Unreachable(f"{type(exc).__name__}", operation=operation)


_STATUS_ERRORS: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: BadRequest,
    409: Conflict,
    410: Expired,
    415: BadRequest,
    422: BadRequest,
}


def _api_error(operation: str, exc: ApiException) -> KubeError:
    status = int(exc.status or 0)
    if status == 0:  # TLS and other failures the client reports without an answer
        # Our client's words (a TLS failure), not the server's: kept whole, on one line.
        text = " ".join(str(exc.reason or "no answer").split())
        return Unreachable(text[:_MAX_MESSAGE], operation=operation)
    message, reason = _status_of(exc.body)
    message = message or _phrase(status)
    if status == 429:
        return TooManyRequests(
            message, status=status, reason=reason, operation=operation,
            retry_after=_retry_after(exc),
        )  # fmt: skip
    if status >= 500:
        return ServerError(message, status=status, reason=reason, operation=operation)
    kind = _STATUS_ERRORS.get(status, UnexpectedResponse)
    return kind(message, status=status, reason=reason, operation=operation)


_REASON = re.compile(r"[A-Za-z]{1,64}")
_UNSHOWN = re.compile(r"[^\x20-\x7e\u00a1-\uffff]|[\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _status_of(body: Any) -> tuple[str, str]:
    """The message and reason of a Kubernetes `Status` answer ("" when it is none)."""
    try:
        found = json.loads(body or "")
    except (ValueError, TypeError):
        return "", ""
    if not isinstance(found, dict) or found.get("kind") != "Status":
        return "", ""
    message, reason = found.get("message"), found.get("reason")
    return (
        _one_line(message) if isinstance(message, str) else "",
        reason if isinstance(reason, str) and _REASON.fullmatch(reason) else "",
    )


def _one_line(text: str) -> str:
    """The first line of `text`, printable and at most _MAX_MESSAGE characters."""
    line = _UNSHOWN.sub(" ", text.strip().splitlines()[0] if text.strip() else "").strip()
    return line if len(line) <= _MAX_MESSAGE else f"{line[: _MAX_MESSAGE - 1]}…"


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
