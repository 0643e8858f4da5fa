from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from capvco_web.health import readiness
from capvco_web.htmx import HtmxHttpRequest


@require_GET
@vary_on_headers("HX-Request")
def dashboard(request: HtmxHttpRequest) -> HttpResponse:
    # HTMX polls this same URL for the status panel only.
    template = "dashboard.html#system-status" if request.htmx else "dashboard.html"
    return render(request, template, {"checks": readiness()})
