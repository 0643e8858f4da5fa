"""What every dashboard page does the same way: the whole page, or for htmx the fragment
it asked for (by the id of its target), and `Vary: HX-Request` on both."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from django.http import HttpResponse, QueryDict
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme

from capvco_web.htmx import HtmxHttpRequest


def page_or_fragment(
    request: HtmxHttpRequest,
    template: str,
    context: Mapping[str, Any],
    *,
    fragments: Collection[str],
    status: int = 200,
) -> HttpResponse:
    """The page, or the partial of `template` named like the htmx request's target (the
    first of `fragments` when the target is none of them)."""
    if request.htmx and not request.htmx.boosted:
        target = request.htmx.target or ""
        name = target if target in fragments else next(iter(fragments))
        template = f"{template}#{name}"
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


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
