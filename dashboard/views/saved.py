"""Saved views: a person saves a list's query under a name (checked against the list's
filter language: dashboard.saved_views), opens it from the list, and deletes it (theirs
only: another's is not found)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from capvco_web.htmx import HtmxHttpRequest
from dashboard.lists import LISTS, list_query
from dashboard.models import SavedView
from dashboard.saved_views import saved_view_create, saved_view_delete, saved_views_of


def view_url(view: SavedView) -> str:
    url = reverse(LISTS[view.list_name].url_name)
    return f"{url}?{view.query}" if view.query else url


def saved_views_context(
    request: HtmxHttpRequest, list_name: str, params: QueryDict
) -> dict[str, Any]:
    """What a list page shows of its saved views, and the query it would save now."""
    return {
        "saved_views": [(view, view_url(view)) for view in saved_views_of(request.user, list_name)],
        "saved_list": list_name,
        "saved_query": list_query(params).urlencode(),
    }


@require_POST
def saved_view_save(request: HtmxHttpRequest) -> HttpResponse:
    list_name = request.POST.get("list", "")
    try:
        view = saved_view_create(
            user=request.user,
            list_name=list_name,
            name=request.POST.get("name", ""),
            query=request.POST.get("query", ""),
        )
    except ValidationError as exc:
        shaped = LISTS.get(list_name)
        context = {
            "problems": exc.messages,
            "back": reverse(shaped.url_name) if shaped else reverse("dashboard:overview"),
        }
        return render(request, "dashboard/saved_view_refused.html", context, status=400)
    messages.success(request, f"View {view.name} saved.")
    return redirect(view_url(view))


@require_POST
def saved_view_remove(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    view = get_object_or_404(saved_views_of(request.user), pk=pk)
    saved_view_delete(view=view, user=request.user)
    messages.success(request, f"View {view.name} deleted.")
    return redirect(reverse(LISTS[view.list_name].url_name))
