"""What the dashboard's pages share: where an action goes back to afterwards."""

from __future__ import annotations

from django.http import QueryDict
from django.utils.http import url_has_allowed_host_and_scheme

from capvco_web.htmx import HtmxHttpRequest


def local_url(request: HtmxHttpRequest, url: str | None, default: str) -> str:
    """`url` when it is a path on this site (a page to go back to), else `default`."""
    if (
        url
        and url.startswith("/")
        and url_has_allowed_host_and_scheme(
            url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    ):
        return url
    return default


def query_of(url: str) -> QueryDict:
    """The query string of a local URL, as a QueryDict."""
    return QueryDict(url.partition("?")[2])
