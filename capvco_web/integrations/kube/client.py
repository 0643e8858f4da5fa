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
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3.exceptions
from kubernetes.client import ApiClient, Configuration, CoreV1Api, CustomObjectsApi
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
    Timeout,
    TooManyRequests,
    Unauthorized,
    UnexpectedResponse,
    Unreachable,
)
from .kubeconfig import Kubeconfig, KubeconfigInvalid, kubeconfig_load
from .types import Listing, Node, Pod, parse_node, parse_pod

logger = logging.getLogger(__name__)

T = TypeVar("T")
TimeoutPair = tuple[float, float]

DEFAULT_TIMEOUT: TimeoutPair = (5.0, 30.0)
DEFAULT_PAGE_SIZE = 500
MAX_PAGES = 10_000
_MAX_MESSAGE = 500
MERGE_PATCH = "application/merge-patch+json"
Json = Mapping[str, Any]


class KubeClient:
    """One cluster's API server, as its kubeconfig reaches it."""

    def __init__(
        self,
        *,
        kubeconfig: Kubeconfig,
        timeout: TimeoutPair = DEFAULT_TIMEOUT,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.server = kubeconfig.server
        self.timeout = timeout
        self.page_size = page_size
        self._api = _api_client(kubeconfig)
        self._core = CoreV1Api(self._api)
        self._custom = CustomObjectsApi(self._api)

    @classmethod
    def from_text(cls, text: str, **options: Any) -> KubeClient:
        """A client from a kubeconfig as stored (YAML); raises KubeconfigInvalid."""
        return cls(kubeconfig=kubeconfig_load(text), **options)

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

    def list_pods(self) -> Listing[Pod]:
        """The pods of every namespace."""
        return self._list(
            "list pods",
            lambda token: self._core.list_pod_for_all_namespaces(
                limit=self.page_size,
                _continue=token,
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

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Json | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One call with a JSON body (or none), answered as the raw response; a status
        other than 2xx raises ApiException as the typed methods do."""
        headers = {"Accept": "application/json"}
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
                found = [parse(_as_mapping(raw)) for raw in page.get("items") or []]
            except KubeError as exc:
                return ended(exc)
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
        """Make one call and read its JSON answer; every failure becomes a KubeError."""
        try:
            response = call()
            body = response.data
        except ApiException as exc:
            raise _api_error(operation, exc) from exc
        except urllib3.exceptions.NewConnectionError as exc:  # refused, or no such host
            raise Unreachable(f"{type(exc).__name__}: {exc}", operation=operation) from exc
        except urllib3.exceptions.TimeoutError as exc:
            raise Timeout(f"no answer in time ({exc})", operation=operation) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}", operation=operation) from exc
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise UnexpectedResponse(
                f"an answer that is not JSON: {exc}", operation=operation
            ) from exc
        if not isinstance(payload, dict):
            raise UnexpectedResponse("an answer that is not a JSON object", operation=operation)
        return payload


def _segment(name: str) -> str:
    return quote(name, safe="")


def _daemonset_path(namespace: str, name: str = "") -> str:
    path = f"/apis/apps/v1/namespaces/{_segment(namespace)}/daemonsets"
    return f"{path}/{_segment(name)}" if name else path


def _as_mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise UnexpectedResponse(f"a list item that is not an object: {value!r:.100}")
    return value


def _api_client(kubeconfig: Kubeconfig) -> ApiClient:
    # A configuration of its own: the loader would otherwise fill (and the process keep)
    # the default one. No urllib3 retries: a timeout costs one read timeout, not four.
    configuration = Configuration()
    configuration.retries = False
    try:
        client: ApiClient = new_client_from_config_dict(  # type: ignore[no-untyped-call]
            config_dict=kubeconfig.config,
            persist_config=False,
            client_configuration=configuration,
        )
    except (ConfigException, ValueError, TypeError) as exc:
        raise KubeconfigInvalid(f"The kubeconfig cannot be used: {exc}") from exc
    return client


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
    message, reason = (exc.reason or "").strip(), ""
    try:
        body = json.loads(exc.body or "")
    except ValueError:
        body = None
    if isinstance(body, dict):
        message = str(body.get("message") or message)
        reason = str(body.get("reason") or "")
    elif exc.body:
        message = str(exc.body).strip()
    message = message[:_MAX_MESSAGE] or f"HTTP {status}"
    if status == 0:  # TLS and other failures the client reports without an answer
        return Unreachable(message, operation=operation)
    if status == 429:
        return TooManyRequests(
            message, status=status, reason=reason, operation=operation,
            retry_after=_retry_after(exc),
        )  # fmt: skip
    if status >= 500:
        return ServerError(message, status=status, reason=reason, operation=operation)
    kind = _STATUS_ERRORS.get(status, UnexpectedResponse)
    return kind(message, status=status, reason=reason, operation=operation)


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
