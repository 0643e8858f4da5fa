"""Pods that ask for GPUs and are not scheduled, with why (`kube.pending_pods`), from
the Kubernetes mirror; `?cluster=<id>` (or `cluster__name=`) for one cluster's (the link on
its page), as every list filters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from autoscale.models import GpuShortfall
from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.permissions import visible
from clusters.models import Cluster
from dashboard.filtersets import PendingPodFilterSet, filled, list_page, unknown_parameters
from kube.models import KubeNode, KubePod
from kube.pending_pods import Why, pending_pods_explained, unscheduled_gpu_pods

TEMPLATE = "dashboard/pending_pods.html"
PAGE_SIZE = 50


@require_GET
@list_page(PendingPodFilterSet)
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
    pods = visible(request.user, KubePod.objects.select_related("cluster"))
    filterset = PendingPodFilterSet(filled(params), queryset=pods, request=request)
    errors = unknown_parameters(params, [*filterset.filters, "page"])
    if not errors and not filterset.is_valid():
        errors = [
            f"{field}: {message}"
            for field, messages in filterset.form.errors.items()
            for message in messages
        ]
    if errors:
        context["errors"] = errors
        return _render(request, context, 400)
    if cluster_id := filterset.form.cleaned_data.get("cluster"):
        clusters = visible(request.user, Cluster.objects.all())
        context["cluster"] = clusters.filter(pk=cluster_id).first()
    page = Paginator(unscheduled_gpu_pods(filterset.qs), PAGE_SIZE).get_page(params.get("page"))
    context["page"] = page
    rows = pending_pods_explained(page, visible(request.user, KubeNode.objects.all()))
    # What the pool autoscaler found for pods of each shape: no pool of theirs can grow.
    short = {
        (s.cluster_id, s.gpu_type, s.gpus): s.text
        for s in GpuShortfall.objects.filter(cluster__in={row.pod.cluster_id for row in rows})
    }
    context["rows"] = [
        PendingRow(
            row.pod,
            row.why,
            short.get((row.pod.cluster_id, row.pod.gpu_type, row.pod.gpu_requests), ""),
        )
        for row in rows
    ]
    return _render(request, context, 200)


@dataclass(frozen=True)
class PendingRow:
    pod: KubePod
    why: Why
    shortfall: str
    """The autoscaler's word when no pool of the pod's type can grow ("": none)."""


def _render(request: HtmxHttpRequest, context: dict[str, Any], status: int) -> HttpResponse:
    return page_or_fragment(request, TEMPLATE, context, fragments=["pod-table"], status=status)
