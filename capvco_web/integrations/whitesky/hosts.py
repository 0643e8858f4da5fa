"""Where the whitesky credential may be sent: the allow-list of hosts.

An entry is a host name or address (`vco.example.com`, `10.0.0.5`, `[::1]`), which allows
https to that host on port 443 only; `https://host:port`, which allows https on that port
only; or `http://host:port`, which allows plain http to exactly that origin (the simulator
on 127.0.0.1). Every entry names its ports: a host listed for its https service is not
thereby listed for whatever else listens on it. Nothing else is allowed: no other scheme,
no wildcard, no URL with a user or a password in it (`https://vco.example@evil.example`
reads as a listed host to a person, and is not one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from capvco_web.integrations.origins import (
    DEFAULT_PORTS,
    Origin,
    UrlRefused,
    netloc,
    origin_read,
    url_origin,
)

# Path segments of RFC 3986 characters (pchar): no query, no fragment.
_PATH = r"(?:/(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*"


class AllowedHosts:
    """The hosts (and plain-http origins) the credential may go to. `source` names the
    list in messages, e.g. the setting it was read from."""

    def __init__(self, entries: Iterable[str], *, source: str) -> None:
        self.source = source
        self._entries = tuple(_entry(text, source) for text in entries if text.strip())

    @property
    def entries(self) -> tuple[str, ...]:
        """The entries, normalised (https on port 443 as the bare host)."""
        return tuple(_written(entry) for entry in self._entries)

    def __repr__(self) -> str:
        return f"AllowedHosts({list(self.entries)!r}, source={self.source!r})"

    def url_pattern(self) -> str:
        """A regular expression (ECMAScript's and Python's alike) of the URLs to listed
        origins written plainly: `https://host[:port]` and a path of RFC 3986 characters, no
        query, fragment, user or trailing dot. Each such URL passes `refusal`; the schema of
        an API that takes these URLs can state it."""
        origins = "|".join(_url_pattern(entry) for entry in self._entries) or "(?!)"
        return f"^(?:{origins}){_PATH}$"

    def refusal(self, url: str) -> str | None:
        """Why the credential may not be sent to `url`, or None when it may."""
        try:
            scheme, host, port = url_origin(
                url,
                not_a_url="not a URL",
                bad_port="the port is not a number from 0 to 65535",
                use_https="use https (https://host/...)",
            )
        except UrlRefused as refused:
            return str(refused)
        if any(entry.allows(scheme, host, port) for entry in self._entries):
            return None
        origin = Origin(scheme, host, port)
        if scheme == "http":
            return (
                f"use https: plain http is allowed only to an origin listed as "
                f"http://host:port in {self.source} (list {origin} there to allow this one)"
            )
        where = _written(origin)
        if not self._entries:
            return f"{where} is not in {self.source} ({self.source} is empty)"
        if port != DEFAULT_PORTS["https"] and Origin("https", host, 443) in self._entries:
            return (
                f"{netloc(host, port)} is not in {self.source} (an entry without a port allows "
                f"port 443 only: list {origin} to allow that port)"
            )
        return f"{where} is not in {self.source}"


def _entry(text: str, source: str) -> Origin:
    entry = text.strip()
    problem = (
        f"{source}: {entry!r} is not a host name (https on port 443) or an "
        "http(s)://host:port origin (that port only)"
    )
    if "*" in entry or any(c.isspace() for c in entry):
        raise ValueError(f"{problem} (no wildcards: list each host)")
    origin = origin_read(entry, problem)
    # A bare host is https's own port; another port is listed as https://host:port.
    return origin if origin.port is not None else replace(origin, port=DEFAULT_PORTS["https"])


def _written(origin: Origin) -> str:
    """`origin` as an entry is written: https on port 443 as the bare host."""
    if origin.scheme == "https" and origin.port == DEFAULT_PORTS["https"]:
        return netloc(origin.host, None)
    return str(origin)


def _url_pattern(origin: Origin) -> str:
    """The origins `origin` allows, as written plainly: scheme and host in lower case, the
    port left out or given without leading zeros."""
    written = f"{origin.scheme}://{_literal(netloc(origin.host, None))}"
    if origin.port == DEFAULT_PORTS[origin.scheme]:
        return f"{written}(?::{origin.port})?"
    return f"{written}:{origin.port}"


def _literal(text: str) -> str:
    """`text` as a regular expression that matches it only, in ECMAScript and Python alike."""
    return "".join(f"\\{c}" if c in r"^$\.*+?()[]{}|/" else c for c in text)
