"""Transport: the one way to the whitesky VCO API (`/api/1`) and its IAM host, for one
customer account. Every operation of `client.py` is sent by `Transport._call`.

All outbound HTTP goes through `Transport._send`, one `requests.Session`, with a
(connect, read) timeout on every call. The session trusts nothing of the environment: no
HTTP(S)_PROXY or ALL_PROXY (a proxy there would see every request, and of a plain-http
origin the JWT itself), no .netrc, no REQUESTS_CA_BUNDLE. A proxy is used only when the
caller names one (`proxy_url`), the CA bundle only when given (`ca_bundle`). Every call
is one `Operation` of `operations.py`; failures come out as the errors of `errors.py`.

The credential is sent only to the hosts of `allowed_hosts` (see `hosts.py`), and no
redirect is followed: a 3xx is an error naming its status and the host it points to. What a
server answered reaches an error message only as whitesky's own JSON `{"message"}`, short
and on one line; any other body (an HTML page of a proxy, a portal) is not shown.

Retries (run by tenacity in `_call`): a call marked `repeatable` (reads; start, stop,
deletes, detaches) is tried up to `RetryPolicy.attempts` times on a retryable failure, with
exponential backoff and jitter, or the server's Retry-After (capped). Any other write is sent
once: when its answer is lost the caller gets `ResponseLost` and must look before trying
again. Independently of that, a 401 leads to one token refresh and one more try, for every
call (a 401 means nothing was done). Sleep, randomness and both clocks are injected.

A transport made with a `deadline` (a `monotonic` time: a pass's end) makes every call end
by then: each try waits at most the time left, none is tried again past it, and a call with
no time left is not sent (`DeadlinePassed`). A whitesky that answers slowly so ends the
pass with typed errors, before the task's time limit stops it with nothing recorded.
"""

from __future__ import annotations

import email.utils
import http
import logging
import random
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Self, TypedDict
from urllib.parse import quote, urlsplit

import requests
import tenacity
import urllib3.exceptions

from . import operations as ops
from .auth import REFRESH_PATH, JwtCredential, token_from_refresh_body
from .errors import (
    BadRequest,
    CapacityExhausted,
    Conflict,
    DeadlinePassed,
    Forbidden,
    HostNotAllowed,
    NotFound,
    RateLimited,
    ResponseLost,
    Unauthorized,
    Unavailable,
    UnexpectedResponse,
    WhiteskyError,
    one_line,
)
from .hosts import AllowedHosts
from .operations import Operation
from .retry import RetryPolicy

logger = logging.getLogger(__name__)

Timeout = tuple[float, float]
QueryValue = str | int | float | bool | list[int] | list[str] | None

DEFAULT_TIMEOUT: Timeout = (5.0, 30.0)
DEFAULT_LONG_TIMEOUT: Timeout = (5.0, 300.0)

_RESERVES = frozenset({ops.RESERVE_VGPU.operation_id, ops.RESERVE_AND_ATTACH_VGPU.operation_id})
_SERVER_MESSAGE_LIMIT = 200
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9.+-]{1,40}/[A-Za-z0-9.+-]{1,60}")


class TransportOptions(TypedDict, total=False):
    """The transport's optional settings (`Transport.__init__`), as keywords a subclass
    passes on unchanged."""

    iam_url: str | None
    on_token_refreshed: Callable[[str], None] | None
    timeout: Timeout
    long_timeout: Timeout
    retry: RetryPolicy | None
    sleep: Callable[[float], None]
    rng: random.Random | None
    clock: Callable[[], float]
    refresh_margin: float
    session: requests.Session | None
    on_answer: Callable[[str, str], None] | None
    proxy_url: str | None
    ca_bundle: str | None
    deadline: float | None
    monotonic: Callable[[], float]


class Transport:
    """Sends the operations of one customer account on one VCO.

    `api_url` is the API base, e.g. `https://cloud.example.com/api/1`; `iam_url` the IAM host
    that refreshes the JWT (None: the token is used as is until it fails). `on_answer`
    hears of every attempt: the operation id and the HTTP status, or "error" (no answer).
    A call to a URL that `allowed_hosts` refuses fails with `HostNotAllowed`, and sends
    nothing.
    """

    def __init__(
        self,
        *,
        api_url: str,
        customer_id: str,
        token: str,
        allowed_hosts: AllowedHosts,
        iam_url: str | None = None,
        on_token_refreshed: Callable[[str], None] | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT,
        long_timeout: Timeout = DEFAULT_LONG_TIMEOUT,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        refresh_margin: float = 60.0,
        session: requests.Session | None = None,
        on_answer: Callable[[str, str], None] | None = None,
        proxy_url: str | None = None,
        ca_bundle: str | None = None,
        deadline: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.customer_id = customer_id
        self.iam_url = iam_url.rstrip("/") if iam_url else None
        self.allowed_hosts = allowed_hosts
        self.timeout = timeout
        self.long_timeout = long_timeout
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._credential = JwtCredential(
            token, on_refreshed=on_token_refreshed, refresh_margin=refresh_margin, clock=clock
        )
        self._session = session or requests.Session()
        self._session.trust_env = False
        self._session.proxies = {}
        self._proxies = {"http": proxy_url, "https": proxy_url} if proxy_url else {}
        self._verify: bool | str = ca_bundle or True
        self._on_answer = on_answer or (lambda operation, status: None)
        self.deadline = deadline
        self._monotonic = monotonic

    @property
    def outcome_window(self) -> float:
        """Seconds from sending a write to the moment its outcome is settled: by then it
        has landed, or it never will (we stopped waiting for its answer). Only a listing
        begun after that can say a lost create or reserve did not happen."""
        return sum(self.long_timeout)

    def _time_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - self._monotonic()

    def _timeout_by_deadline(self, timeout: Timeout, operation: str) -> Timeout:
        """The call's timeout, cut to the time left before the deadline."""
        left = self._time_left()
        if left is None:
            return timeout
        if left <= 0:
            raise DeadlinePassed("the pass's time is up: not sent", operation=operation)
        return (min(timeout[0], left), min(timeout[1], left))

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        params: list[tuple[str, str]] | None,
        json_body: Any,
        timeout: Timeout,
        operation: str,
    ) -> requests.Response:
        """The one place where the client talks to the network: only to allowed hosts,
        never on to where a redirect points, and through a proxy only when one was named."""
        if refusal := self.allowed_hosts.refusal(url):
            raise HostNotAllowed(f"credential not sent: {refusal}", operation=operation)
        self._session.trust_env = False  # whatever a caller did to the session since
        return self._session.request(
            method,
            url,
            headers=dict(headers),
            params=params,
            json=json_body,
            timeout=timeout,
            allow_redirects=False,
            proxies=self._proxies,
            verify=self._verify,
        )

    def _call(
        self,
        op: Operation,
        *,
        path: Mapping[str, str | int] | None = None,
        query: Mapping[str, QueryValue] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        url = self._url(op, dict(path or {}))
        params = _query_params(op, query or {})
        if body is not None:
            _check_body(op, body, "")
        timeout = self.long_timeout if op.long_running else self.timeout

        refreshed_after_401 = False
        maybe_acted = False
        refresh_failed = False

        def attempt() -> Any:
            """One try, with its one token refresh after a 401 (a 401 means nothing was
            done, so the try after it is not a retry)."""
            nonlocal refreshed_after_401, maybe_acted, refresh_failed
            while True:
                started = time.monotonic()
                try:
                    token = self._bearer()
                    response = self._send(
                        op.method,
                        url,
                        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
                        params=params,
                        json_body=body,
                        timeout=self._timeout_by_deadline(timeout, op.operation_id),
                        operation=op.operation_id,
                    )
                except requests.RequestException as exc:
                    self._on_answer(op.operation_id, "error")
                    error, sent = self._transport_error(op, exc)
                    maybe_acted = maybe_acted or sent
                    raise error from None
                # A WhiteskyError (a host not allowed, or the refresh before the call) goes
                # on as it is.
                self._on_answer(op.operation_id, str(response.status_code))
                logger.debug(
                    "whitesky %s %s -> %s (%.3fs)",
                    op.method,
                    op.operation_id,
                    response.status_code,
                    time.monotonic() - started,
                )
                if response.status_code == 401 and not refreshed_after_401 and self.iam_url:
                    refreshed_after_401 = True
                    try:
                        self._refresh(used=token)
                    except WhiteskyError:
                        refresh_failed = True
                        raise
                    continue
                if 200 <= response.status_code < 300:
                    return self._json(op, response)
                if response.status_code == 404 and maybe_acted and op.gone_means_done:
                    logger.info("whitesky: %s repeated after a lost answer: gone", op.operation_id)
                    return None
                maybe_acted = maybe_acted or (
                    response.status_code >= 500 and response.status_code != 503
                )
                raise self._http_error(op, response)

        def may_repeat(exc: BaseException) -> bool:
            # Only a call that is safe to repeat is tried again, and only on a failure that
            # says trying again can help: a write whose answer was lost is never repeated
            # here. The token was refused and no other came: that ends the call too.
            # Nor past the deadline: the pass has no time left for another try.
            left = self._time_left()
            return (
                op.repeatable
                and isinstance(exc, WhiteskyError)
                and exc.retryable
                and not refresh_failed
                and (left is None or left > 0)
            )

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(may_repeat),
            stop=tenacity.stop_after_attempt(self.retry.attempts),
            wait=self._backoff,
            sleep=self._sleep,
            before_sleep=lambda state: _log_retry(op, state),
            reraise=True,
        )
        return retrying(attempt)

    def _backoff(self, state: tenacity.RetryCallState) -> float:
        """Seconds before the next try: the server's Retry-After when it sent one, else
        the policy's backoff with jitter from the client's own randomness; never past the
        deadline."""
        error = state.outcome.exception() if state.outcome else None
        retry_after = error.retry_after if isinstance(error, RateLimited | Unavailable) else None
        delay = self.retry.delay(state.attempt_number - 1, retry_after=retry_after, rng=self._rng)
        left = self._time_left()
        return delay if left is None else max(0.0, min(delay, left))

    def _url(self, op: Operation, path: dict[str, str | int]) -> str:
        if "customer_id" in op.path_params:
            path["customer_id"] = self.customer_id
        if set(path) != op.path_params:
            raise ValueError(
                f"{op.operation_id}: path parameters {sorted(path)} != {sorted(op.path_params)}"
            )
        quoted = {name: quote(str(value), safe="") for name, value in path.items()}
        return self.api_url + op.path.format(**quoted)

    def _bearer(self) -> str:
        credential = self._credential
        if self.iam_url and credential.needs_refresh():
            try:
                self._refresh(used=credential.token)
            except WhiteskyError as exc:
                if credential.expired():
                    raise
                logger.warning("whitesky: early token refresh failed, token still valid: %s", exc)
        return credential.token

    def _refresh(self, *, used: str) -> None:
        """Swaps the JWT for a new one from the IAM host. `used` is the token the caller
        sent; if another thread already replaced it, there is nothing to do."""
        assert self.iam_url is not None
        credential = self._credential
        with credential.lock:
            if credential.token != used:
                return
            try:
                response = self._send(
                    "GET",
                    self.iam_url + REFRESH_PATH,
                    headers={"Authorization": f"Bearer {used}"},
                    params=None,
                    json_body=None,
                    timeout=self._timeout_by_deadline(self.timeout, "refreshJWT"),
                    operation="refreshJWT",
                )
            except requests.RequestException as exc:
                raise Unavailable(
                    f"token refresh got no answer ({type(exc).__name__})", operation="refreshJWT"
                ) from None
            if response.status_code != 200:
                why = (
                    _redirect_message(response)
                    if 300 <= response.status_code < 400
                    else self._server_message(response)
                )
                raise Unauthorized(
                    f"token refresh refused: {why}",
                    status=response.status_code,
                    operation="refreshJWT",
                    retryable=response.status_code >= 500 or response.status_code == 429,
                )
            credential.replace(token_from_refresh_body(response.text))
            logger.info("whitesky: token refreshed for customer %s", self.customer_id)

    def _json(self, op: Operation, response: requests.Response) -> Any:
        if not response.content or not response.content.strip():
            return None
        try:
            return response.json()
        except ValueError:
            raise UnexpectedResponse(
                f"answer is not JSON ({_body_kind(response)} answer of "
                f"{len(response.content)} bytes, not shown)",
                status=response.status_code,
                operation=op.operation_id,
            ) from None

    def _server_message(self, response: requests.Response) -> str:
        """whitesky's `{"message"}` (Flask-RESTX errors), short and on one line; for any
        other answer only the status's standard phrase: a foreign body is never shown."""
        try:
            data = response.json()
        except ValueError:
            data = None
        message = data.get("message") if isinstance(data, dict) else None
        if isinstance(message, str) and message.strip():
            return one_line(self._credential.redact(message), _SERVER_MESSAGE_LIMIT)
        try:
            phrase = http.HTTPStatus(response.status_code).phrase
        except ValueError:
            phrase = "Unknown status"
        return f"{phrase} (no whitesky message; {_body_kind(response)} answer not shown)"

    def _http_error(self, op: Operation, response: requests.Response) -> WhiteskyError:
        status = response.status_code
        where = op.operation_id
        if 300 <= status < 400:
            return WhiteskyError(_redirect_message(response), status=status, operation=where)
        message = self._server_message(response)
        if status in (400, 422):
            return BadRequest(message, status=status, operation=where)
        if status == 401:
            return Unauthorized(message, status=status, operation=where)
        if status == 403:
            return Forbidden(message, status=status, operation=where)
        if status == 404:
            return NotFound(message, status=status, operation=where)
        if status == 409:
            if op.operation_id in _RESERVES and _means_no_capacity(message):
                return CapacityExhausted(message, status=status, operation=where)
            return Conflict(message, status=status, operation=where)
        if status == 429:
            retry_after = _retry_after(response.headers.get("Retry-After"))
            return RateLimited(message, status=status, operation=where, retry_after=retry_after)
        if status >= 500:
            if not op.repeatable and status != 503:
                return ResponseLost(
                    f"outcome unknown, look before repeating: {message}",
                    status=status,
                    operation=where,
                )
            retry_after = _retry_after(response.headers.get("Retry-After"))
            return Unavailable(message, status=status, operation=where, retry_after=retry_after)
        return WhiteskyError(message, status=status, operation=where, retryable=False)

    def _transport_error(
        self, op: Operation, exc: requests.RequestException
    ) -> tuple[WhiteskyError, bool]:
        """The error for a call that got no HTTP answer, and whether it may have arrived."""
        where = op.operation_id
        kind = type(exc).__name__
        if isinstance(exc, requests.exceptions.InvalidURL | requests.exceptions.MissingSchema):
            return WhiteskyError(f"bad URL ({kind})", operation=where, retryable=False), False
        if _never_sent(exc):
            return Unavailable(f"could not connect ({kind})", operation=where), False
        if op.repeatable:
            return Unavailable(f"no answer ({kind})", operation=where), True
        return (
            ResponseLost(
                f"no answer ({kind}): outcome unknown, look before repeating", operation=where
            ),
            True,
        )


# --- helpers that only the transport needs ----------------------------------------------


def _redirect_message(response: requests.Response) -> str:
    """A 3xx named by where it points (the host only: a path or query may carry anything)."""
    location = response.headers.get("Location", "")
    try:
        parts = urlsplit(location)
        host = parts.hostname
        port = parts.port
    except ValueError:
        host, port = "an unreadable Location", None
    where = host or ("the same host" if location else "nowhere (no Location)")
    if host and ":" in host:
        where = f"[{host}]"
    if host and port is not None:
        where = f"{where}:{port}"
    return f"redirected to {one_line(where, 100)}; redirects are not followed"


def _body_kind(response: requests.Response) -> str:
    """The media type of an answer, when it reads as one (it is the server's text too)."""
    media_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if not media_type:
        return "an untyped"
    return media_type if _MEDIA_TYPE.fullmatch(media_type) else "an unreadably typed"


def _query_params(op: Operation, query: Mapping[str, QueryValue]) -> list[tuple[str, str]] | None:
    unknown = set(query) - op.query
    if unknown:
        raise ValueError(f"{op.operation_id}: query parameters not declared: {sorted(unknown)}")
    params: list[tuple[str, str]] = []
    for name, value in query.items():
        if value is None:
            continue
        if isinstance(value, bool):
            params.append((name, "true" if value else "false"))
        elif isinstance(value, list):
            params.append((name, ",".join(str(item) for item in value)))
        else:
            params.append((name, str(value)))
    return params or None


def _check_body(op: Operation, body: Mapping[str, Any], prefix: str) -> None:
    for name, value in body.items():
        field = prefix + name
        if field in op.body:
            continue
        nested = any(declared.startswith(field + ".") for declared in op.body)
        if nested and isinstance(value, Mapping):
            _check_body(op, value, field + ".")
            continue
        raise ValueError(f"{op.operation_id}: body field not declared: {field}")


def _never_sent(exc: requests.RequestException) -> bool:
    """True when the connection was never made, so the server cannot have seen the call."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if not isinstance(exc, requests.exceptions.ConnectionError):
        return False
    reason: Any = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the cause
    return isinstance(reason, urllib3.exceptions.ConnectTimeoutError)  # incl. NewConnectionError


def _log_retry(op: Operation, state: tenacity.RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    delay = state.next_action.sleep if state.next_action else 0.0
    logger.warning(
        "whitesky: %s failed (%s); retry %d in %.2fs",
        op.operation_id,
        error,
        state.attempt_number,
        delay,
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _means_no_capacity(message: str) -> bool:
    """A 409 on a reserve means the card is full, unless the message is about something else
    the description lets a reserve conflict on: the VM's state (reserve-and-attach to a running
    or deleted VM) or a name already taken."""
    lowered = message.lower()
    return not any(
        word in lowered for word in ("running", "halted", "stopped", "deleted", "already exists")
    )
