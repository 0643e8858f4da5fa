"""Which URLs the whitesky credential may be sent to: https to a listed host, or exactly a
listed http://host:port origin (the simulator); nothing else."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capvco_web.integrations.whitesky import AllowedHosts

ALLOWED = AllowedHosts(
    ["vco.example", "https://iam.example:8443", "http://127.0.0.1:8081"],
    source="WHITESKY_ALLOWED_HOSTS",
)


@pytest.mark.parametrize(
    "url",
    [
        "https://vco.example/api/1",
        "https://VCO.example./api/1",  # host names are case-insensitive; a final dot is the same
        "https://vco.example:443/api/1",  # a bare host: https on its default port
        "https://iam.example:8443",
        "http://127.0.0.1:8081/api/1",
    ],
)
def test_listed_hosts_are_allowed(url: str) -> None:
    assert ALLOWED.refusal(url) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://evil.example/api/1", "evil.example is not in WHITESKY_ALLOWED_HOSTS"),
        ("https://vco.example.evil.example/api/1", "not in WHITESKY_ALLOWED_HOSTS"),
        ("https://evilvco.example/api/1", "not in WHITESKY_ALLOWED_HOSTS"),
        ("http://vco.example/api/1", "use https"),
        ("https://iam.example/x", "not in WHITESKY_ALLOWED_HOSTS"),  # listed with port 8443 only
        # A bare host allows https on port 443 only; the refusal says how to list another.
        (
            "https://vco.example:9443/api/1",
            "vco.example:9443 is not in WHITESKY_ALLOWED_HOSTS (an entry without a port allows "
            "port 443 only: list https://vco.example:9443 to allow that port)",
        ),
        ("http://127.0.0.1:8082/api/1", "use https"),  # another port of an http origin
        ("http://127.0.0.1/api/1", "use https"),
        ("https://127.0.0.1:8081/api/1", "not in WHITESKY_ALLOWED_HOSTS"),
        ("https://vco.example@evil.example/api/1", "user or password"),
        ("https://user:pw@vco.example/api/1", "user or password"),
        ("ftp://vco.example/", "use https"),
        ("vco.example/api/1", "use https"),
        ("https:///api/1", "no host"),
        ("https://vco.example:99999/", "port"),
        ("https://[::1/", "not a URL"),
        # What parsers read differently is refused before any is asked.
        ("https://evil.exa\nmple.vco.example/", "spaces, control characters or backslashes"),
        ("https://vco.exa\tmple/api/1", "spaces, control characters or backslashes"),
        ("https://evil.example\\@vco.example/", "spaces, control characters or backslashes"),
        ("https://vco.example /api/1", "spaces, control characters or backslashes"),
    ],
)
def test_other_urls_are_refused_saying_why(url: str, why: str) -> None:
    refusal = ALLOWED.refusal(url)
    assert refusal is not None
    assert why in refusal


def test_an_empty_list_refuses_everything_and_says_how_to_allow() -> None:
    refusal = AllowedHosts([], source="WHITESKY_ALLOWED_HOSTS").refusal("https://vco.example")
    assert refusal is not None
    assert "WHITESKY_ALLOWED_HOSTS is empty" in refusal


@pytest.mark.parametrize(
    "entry",
    [
        "*",
        "*.example.com",
        "https://vco.example/api/1",  # an origin, not a URL
        "https://vco.example?x=1",
        "ftp://vco.example",
        "http://user@127.0.0.1:8081",
        "https://",
        "vco example",
    ],
)
def test_entries_that_are_not_a_host_or_an_origin_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="WHITESKY_ALLOWED_HOSTS") as refused:
        AllowedHosts([entry], source="WHITESKY_ALLOWED_HOSTS")
    assert "a host name (https on port 443) or an http(s)://host:port origin" in str(refused.value)


def test_entries_are_normalised() -> None:
    hosts = AllowedHosts(["  VCO.Example. ", "", "HTTP://LocalHost:8081/"], source="X")
    assert hosts.entries == ("vco.example", "http://localhost:8081")


# Generating from the pattern can be slow on a busy machine: the health check is of speed.
@settings(
    max_examples=300, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(url=st.from_regex(ALLOWED.url_pattern(), fullmatch=True))
def test_every_url_the_pattern_takes_is_allowed(url: str) -> None:
    # The pattern is what the API's schema states for an account's URLs: never more.
    assert ALLOWED.refusal(url) is None


@pytest.mark.parametrize(
    ("url", "taken"),
    [
        ("https://vco.example/api/1", True),
        ("https://vco.example:9443/api/1", False),  # a bare host: port 443 only
        ("https://vco.example:443/api/1", True),
        ("https://iam.example:8443", True),
        ("https://iam.example", False),  # that entry allows port 8443 only
        ("http://127.0.0.1:8081/api/1", True),
        ("http://127.0.0.1/api/1", False),
        ("https://VCO.example/api/1", False),  # allowed, but not written plainly
        ("https://vco.example./api/1", False),
        ("https://vco.example/api/1?x=1", False),
        ("https://vco.example:0443/api/1", False),
    ],
)
def test_the_pattern_takes_listed_urls_written_plainly(url: str, taken: bool) -> None:
    assert bool(re.fullmatch(ALLOWED.url_pattern(), url)) is taken
