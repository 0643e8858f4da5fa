"""Pods that ask for GPUs and are not scheduled, with why (`clusters.pending_pods`), from
the Kubernetes mirror; `?cluster=<id>` for one cluster's (the link on its page)."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from capvco_web.htmx import HtmxHttpRequest
from capvco_web.permissions import visible
from clusters.models import Cluster, KubeNode, KubePod
from clusters.pending_pods import pending_pods_explained, unscheduled_gpu_pods
from dashboard.views.common import page_or_fragment

TEMPLATE = "dashboard/pending_pods.html"
PAGE_SIZE = 50
PARAMS = ("cluster", "page")


@require_GET
def pending_pods(request: HtmxHttpRequest) -> HttpResponse:
    params = request.GET
    list_url = reverse("dashboard:pending-pods")
    context: dict[str, Any] = {
        "errors": [],
        "rows": [],
        "page": None,
        "cluster": None,
        "page_url": f"{list_url}?{params.urlencode()}" if params else list_url,
    }
    if unknown := sorted(set(params) - set(PARAMS)):
        context["errors"] = [
            f"{name}: not a filter of this list (use {', '.join(PARAMS)})" for name in unknown
        ]
        return _render(request, context, 400)
    pods = visible(request.user, KubePod.objects.select_related("cluster"))
    if "cluster" in params:
        asked = params["cluster"]
        clusters = visible(request.user, Cluster.objects.all())
        context["cluster"] = clusters.filter(pk=int(asked)).first() if asked.isdigit() else None
        if context["cluster"] is None:
            context["errors"] = [f"cluster: no cluster with id {params['cluster']!r}"]
            return _render(request, context, 400)
        pods = pods.filter(cluster=context["cluster"])
    page = Paginator(unscheduled_gpu_pods(pods), PAGE_SIZE).get_page(params.get("page"))
    context["page"] = page
    context["rows"] = pending_pods_explained(page, visible(request.user, KubeNode.objects.all()))
    return _render(request, context, 200)


def _render(request: HtmxHttpRequest, context: dict[str, Any], status: int) -> HttpResponse:
    return page_or_fragment(request, TEMPLATE, context, fragments=["pod-table"], status=status)
