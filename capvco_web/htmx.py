"""Typing for requests that went through django-htmx's middleware, and what every page
(the dashboard's, the notifications page) does the same way: the whole page, or for htmx
the fragment it asked for (by the id of its target), and `Vary: HX-Request` on both."""

from collections.abc import Collection, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


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
