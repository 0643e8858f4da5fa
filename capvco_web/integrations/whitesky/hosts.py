"""Where the whitesky credential may be sent: the allow-list of hosts.

An entry is a host name or address (`vco.example.com`, `10.0.0.5`, `[::1]`), which allows
https to that host on any port; `https://host:port`, which allows https on that port only;
or `http://host:port`, which allows plain http to exactly that origin (the simulator on
127.0.0.1). Nothing else is allowed: no other scheme, no wildcard, no URL with a user or a
password in it (`https://vco.example@evil.example` reads as a listed host to a person, and
is not one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
# A port from 1 to 65535, as written without leading zeros.
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# Path segments of RFC 3986 characters (pchar): no query, no fragment.
_PATH = r"(?:/(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*"


@dataclass(frozen=True)
class _Entry:
    scheme: str
    host: str
    port: int | None  # None: any port (https only)

    def allows(self, scheme: str, host: str, port: int) -> bool:
        return (
            self.scheme == scheme and self.host == host and (self.port is None or self.port == port)
        )

    def url_pattern(self) -> str:
        """The origins this entry allows, as written plainly: scheme and host in lower
        case, the port left out or given without leading zeros."""
        origin = f"{self.scheme}://{_literal(_netloc(self.host, None))}"
        if self.port is None:
            return f"{origin}(?::{_PORT})?"
        if self.port == _DEFAULT_PORTS[self.scheme]:
            return f"{origin}(?::{self.port})?"
        return f"{origin}:{self.port}"

    def __str__(self) -> str:
        where = _netloc(self.host, self.port)
        return where if self.scheme == "https" and self.port is None else f"{self.scheme}://{where}"


class AllowedHosts:
    """The hosts (and plain-http origins) the credential may go to. `source` names the
    list in messages, e.g. the setting it was read from."""

    def __init__(self, entries: Iterable[str], *, source: str) -> None:
        self.source = source
        self._entries = tuple(_entry(text, source) for text in entries if text.strip())

    @property
    def entries(self) -> tuple[str, ...]:
        """The entries, normalised."""
        return tuple(str(entry) for entry in self._entries)

    def __repr__(self) -> str:
        return f"AllowedHosts({list(self.entries)!r}, source={self.source!r})"

    def url_pattern(self) -> str:
        """A regular expression (ECMAScript's and Python's alike) of the URLs to listed
        origins written plainly: `https://host[:port]` and a path of RFC 3986 characters, no
        query, fragment, user or trailing dot. Each such URL passes `refusal`; the schema of
        an API that takes these URLs can state it."""
        origins = "|".join(entry.url_pattern() for entry in self._entries) or "(?!)"
        return f"^(?:{origins}){_PATH}$"

    def refusal(self, url: str) -> str | None:
        """Why the credential may not be sent to `url`, or None when it may."""
        if any(c.isspace() or not c.isprintable() or c == "\\" for c in url):
            # urlsplit drops tabs and line breaks that another parser may keep.
            return "the URL holds spaces, control characters or backslashes"
        try:
            parts = urlsplit(url)
        except ValueError:
            return "not a URL"
        try:
            port = parts.port
        except ValueError:
            return "the port is not a number from 0 to 65535"
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            return "use https (https://host/...)"
        if parts.username is not None or parts.password is not None:
            return "a URL with a user or password in it is refused"
        host = _host(parts)
        if not host:
            return "the URL has no host"
        port = port if port is not None else _DEFAULT_PORTS[scheme]
        if any(entry.allows(scheme, host, port) for entry in self._entries):
            return None
        if scheme == "http":
            return (
                f"use https: plain http is allowed only to an origin listed as "
                f"http://host:port in {self.source}"
            )
        if not self._entries:
            return (
                f"{host} is not in {self.source} ({self.source} is empty: list the whitesky hosts)"
            )
        return f"{_netloc(host, port if port != 443 else None)} is not in {self.source}"


def _entry(text: str, source: str) -> _Entry:
    entry = text.strip()
    problem = f"{source}: {entry!r} is not a host name or an http(s)://host:port origin"
    if "*" in entry or any(c.isspace() for c in entry):
        raise ValueError(f"{problem} (no wildcards: list each host)")
    url = entry if "://" in entry else f"https://{entry}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(problem) from None
    scheme = parts.scheme.lower()
    host = _host(parts)
    if (
        scheme not in _DEFAULT_PORTS
        or not host
        or parts.username is not None
        or parts.password is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise ValueError(problem)
    if scheme == "http":  # exactly one origin
        return _Entry("http", host, port if port is not None else 80)
    return _Entry("https", host, port)


def _host(parts: SplitResult) -> str:
    return (parts.hostname or "").rstrip(".")  # urlsplit lowercases it


def _literal(text: str) -> str:
    """`text` as a regular expression that matches it only, in ECMAScript and Python alike."""
    return "".join(f"\\{c}" if c in r"^$\.*+?()[]{}|/" else c for c in text)


def _netloc(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"
