"""The origins of an allow-list, as the whitesky hosts and the Kubernetes API servers lists
both read them: an entry `host` (https to that host: the Kubernetes list reads it as any
port, the whitesky and webhook lists as port 443 only), `https://host:port` (that port
only) or `http://host:port` (plain http to exactly that origin)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int | None  # None: any port (https only)

    def allows(self, scheme: str, host: str, port: int) -> bool:
        return (
            self.scheme == scheme and self.host == host and (self.port is None or self.port == port)
        )

    def __str__(self) -> str:
        where = netloc(self.host, self.port)
        return where if self.port is None else f"{self.scheme}://{where}"


def origin_read(entry: str, problem: str) -> Origin:
    """The origin `entry` (stripped) names; ValueError(`problem`) when it is no host and no
    http(s)://host:port origin: another scheme, a user or password, a path, query or
    fragment."""
    url = entry if "://" in entry else f"https://{entry}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(problem) from None
    scheme = parts.scheme.lower()
    host = url_host(parts)
    if (
        scheme not in DEFAULT_PORTS
        or not host
        or parts.username is not None
        or parts.password is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise ValueError(problem)
    if scheme == "http":  # exactly one origin
        return Origin("http", host, port if port is not None else 80)
    return Origin("https", host, port)


class UrlRefused(ValueError):
    """A URL that goes to no origin an allow-list can hold; the message says why."""


def url_origin(url: str, *, not_a_url: str, bad_port: str, use_https: str) -> tuple[str, str, int]:
    """The scheme, host and port (the scheme's own when none is written) `url` goes to.
    UrlRefused when it holds spaces, control characters or backslashes, a user or a
    password, or no host; with the caller's words when urlsplit cannot read it
    (`not_a_url`), its port is not one (`bad_port`) or its scheme is not http(s)
    (`use_https`)."""
    if any(c.isspace() or not c.isprintable() or c == "\\" for c in url):
        # urlsplit drops tabs and line breaks that another parser may keep.
        raise UrlRefused("the URL holds spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise UrlRefused(not_a_url) from None
    try:
        port = parts.port
    except ValueError:
        raise UrlRefused(bad_port) from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise UrlRefused(use_https)
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("a URL with a user or password in it is refused")
    host = url_host(parts)
    if not host:
        raise UrlRefused("the URL has no host")
    return scheme, host, port if port is not None else DEFAULT_PORTS[scheme]


def url_host(parts: SplitResult) -> str:
    return (parts.hostname or "").rstrip(".")  # urlsplit lowercases it


def netloc(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"
