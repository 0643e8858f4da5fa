"""Clusters: the list with what each holds, and one cluster with its sites, pools (how
their GPU type resolves), machines with their VMs and GPUs, its plan (drift), and its
Kubernetes: how well it was observed, the GPU add-on, its nodes and what the mirror
flagged; and its SR-IOV: enabled or not, its pods' NICs per state."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from billing.costs import LabelKeyInvalid, cost_by_label
from billing.selectors import cost_by_label_over
from billing.windows import Window
from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.permissions import User, visible
from cloud.models import Location
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.plan import cluster_plan
from clusters.selectors import cluster_passes
from dashboard.columns import COLUMNS, columns_chosen
from dashboard.csv_export import chunks, csv_refused, csv_response
from dashboard.filtersets import ClusterListFilterSet, filled, list_page, unknown_parameters
from dashboard.lists import CLUSTER_COLUMNS, LISTS, PAGE, list_query
from dashboard.pages.cluster import NICS_IN, PHASE_IN, cluster_body
from dashboard.views.money import cluster_locations, cluster_reader, money_section
from dashboard.views.saved import saved_views_context
from dashboard.views.setup import accounts_for_new_clusters
from gpus.models import BILLED_STATES, VgpuReservation
from kube.gpu_use import gpu_use
from kube.plan import kube_plan
from kube.selectors import (
    cluster_observation,
    clusters_with_kube_summary,
    kube_observation_problem,
)
from sriov.models import PodNic

CLUSTERS_PER_PAGE = 50
PASSES_SHOWN = 20
Phase = Machine.Phase


@dataclass
class ClusterSummary:
    cluster: Cluster
    locations: list[str]
    pools: int
    machines: int
    phases: dict[str, int]
    gpus: int
    kube_problem: str = ""
    """What is wrong with its Kubernetes observation ("": nothing)."""

    @property
    def running(self) -> int:
        return self.phases.get(Phase.RUNNING, 0)

    @property
    def failed(self) -> int:
        return self.phases.get(Phase.FAILED, 0)

    @property
    def kube_observation(self) -> str:
        """How its Kubernetes is observed, as its Kubernetes column says (the problem
        apart: `kube_problem`)."""
        if self.kube_problem:
            return "failing"
        if not self.cluster.has_kubeconfig:
            return "not observed"
        if cluster_observation(self.cluster).started_at is None:
            return "not yet"
        return "ok"

    @property
    def kube_flags(self) -> int:
        """Flags the Kubernetes mirror raised in the cluster (see its page)."""
        c: Any = self.cluster
        return int(
            c.summary_machines_node_missing + c.summary_nodes_gpus_missing + c.summary_nodes_unowned
        )


def cluster_filterset(request: HtmxHttpRequest, params: QueryDict) -> ClusterListFilterSet:
    """The list's filters over the clusters the user sees, by name, each with its
    Kubernetes summary."""
    clusters = clusters_with_kube_summary(
        visible(
            request.user,
            Cluster.objects.select_related("account", "kube_observation").order_by("name"),
        )
    )
    return ClusterListFilterSet(filled(params), queryset=clusters, request=request)


def cluster_summaries(
    user: User, clusters: Sequence[Cluster], shown: frozenset[str]
) -> list[ClusterSummary]:
    """What each of `clusters` (a page, or a chunk of the CSV) holds: its machines per
    phase, pools, GPUs held and locations, a query each for them all; what only a hidden
    column shows is not read."""
    ids = [c.pk for c in clusters]
    phases: dict[int, dict[str, int]] = defaultdict(dict)
    with_phases = bool({"machines", "running", "failed"} & shown)
    for cluster_id, phase, n in (
        visible(user, Machine.objects.filter(pool__cluster__in=ids if with_phases else []))
        .values_list("pool__cluster_id", "phase")
        .annotate(n=Count("pk"))
        .values_list("pool__cluster_id", "phase", "n")
        .order_by()
    ):
        phases[cluster_id][phase] = n
    pools = dict(
        visible(user, MachinePool.objects.filter(cluster__in=ids if "pools" in shown else []))
        .values_list("cluster_id")
        .annotate(n=Count("pk"))
        .values_list("cluster_id", "n")
        .order_by()
    )
    gpus = dict(
        visible(
            user,
            VgpuReservation.objects.filter(
                machine__pool__cluster__in=ids if "gpus" in shown else [],
                state__in=BILLED_STATES,
            ),
        )
        .values_list("machine__pool__cluster_id")
        .annotate(n=Count("pk"))
        .values_list("machine__pool__cluster_id", "n")
        .order_by()
    )
    locations: dict[int, list[str]] = defaultdict(list)
    for cluster_id, location in (
        visible(user, ClusterSite.objects.filter(cluster__in=ids if "locations" in shown else []))
        .order_by("location__name")
        .values_list("cluster_id", "location__name")
    ):
        locations[cluster_id].append(location)
    now, interval = timezone.now(), settings.OBSERVE_INTERVAL
    return [
        ClusterSummary(
            cluster=c,
            locations=locations[c.pk],
            pools=pools.get(c.pk, 0),
            machines=sum(phases[c.pk].values()),
            phases=phases[c.pk],
            gpus=gpus.get(c.pk, 0),
            kube_problem=kube_observation_problem(c, now=now, interval=interval),
        )
        for c in clusters
    ]


@require_GET
@list_page(ClusterListFilterSet)
def cluster_list(request: HtmxHttpRequest) -> HttpResponse:
    filterset = cluster_filterset(request, request.GET)
    chosen = columns_chosen(request.GET, CLUSTER_COLUMNS)
    shaped: dict[str, Any] = {
        "chosen": chosen,
        "shown": chosen.keys,
        "list_url": reverse("dashboard:clusters"),
        # The filters the page was asked with, kept when the columns change.
        "filters": [
            (name, value)
            for name, values in filled(request.GET).lists()
            if name not in (COLUMNS, PAGE)
            for value in values
        ],
        "csv_query": list_query(request.GET).urlencode(),
        **saved_views_context(request, "clusters", request.GET),
    }
    errors = unknown_parameters(request.GET, [*filterset.filters, COLUMNS, PAGE]) or chosen.errors
    if not errors and not filterset.is_valid():
        errors = [f"{f}: {m}" for f, messages in filterset.form.errors.items() for m in messages]
    if errors:
        refused: dict[str, Any] = {
            **shaped,
            "errors": errors,
            "page_url": request.get_full_path(),
        }
        return page_or_fragment(
            request, "dashboard/clusters.html", refused, fragments=["cluster-table"], status=400
        )
    page = Paginator(filterset.qs, CLUSTERS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        **shaped,
        "page": page,
        "failed_only": filterset.form.cleaned_data.get("failed") is True,
        "summaries": cluster_summaries(request.user, list(page), chosen.keys),
        "page_url": request.get_full_path(),
        "can_add": not request.htmx and accounts_for_new_clusters(request).exists(),
    }
    return page_or_fragment(
        request, "dashboard/clusters.html", context, fragments=["cluster-table"]
    )


# --- CSV --------------------------------------------------------------------------------

CSV_COLUMNS = [
    "id", "name", "account", "state", "locations", "pools", "machines", "running", "failed",
    "gpus_held", "nodes_ready", "nodes", "kube_flags", "gpu_allocatable", "kube_observation",
    "kube_observation_problem",
]  # fmt: skip


def _csv_rows(
    user: User, clusters: QuerySet[Cluster], shown: frozenset[str]
) -> Iterator[dict[str, object]]:
    for chunk in chunks(clusters):
        for s in cluster_summaries(user, chunk, shown):
            c: Any = s.cluster  # with its Kubernetes summary (`summary_*`)
            yield dict(zip(CSV_COLUMNS, [
                c.pk, c.name, c.account.name, c.state, ", ".join(s.locations), s.pools,
                s.machines, s.running, s.failed, s.gpus,
                c.summary_nodes_ready, c.summary_nodes, s.kube_flags, c.summary_gpu_allocatable,
                s.kube_observation, s.kube_problem,
            ], strict=True))  # fmt: skip


@require_GET
@list_page(ClusterListFilterSet)
def cluster_csv(request: HtmxHttpRequest) -> HttpResponse | StreamingHttpResponse:
    """Every cluster the filters select (not one page), by name as on the page, as CSV,
    with the columns the page shows (`cols`): the page's figures, read per chunk."""
    filterset = cluster_filterset(request, request.GET)
    if problems := LISTS["clusters"].query_problems(request.GET, filterset):
        return csv_refused(problems)
    chosen = columns_chosen(request.GET, CLUSTER_COLUMNS)
    columns = chosen.csv(CSV_COLUMNS)
    clusters = filterset.qs.order_by("name", "pk")
    return csv_response("clusters", columns, _csv_rows(request.user, clusters, chosen.keys))


def cluster_for_page(request: HtmxHttpRequest, pk: int) -> Cluster:
    """The cluster as its page shows it, with its Kubernetes summary, its machines per
    phase and its pod NICs per state; 404 when the user does not see it."""
    # Every role that sees a cluster sees its machines and pod NICs (the `view` roles).
    machines = Machine.objects.filter(pool__cluster=OuterRef("pk"))
    nics = PodNic.objects.filter(cluster=OuterRef("pk"))
    return get_object_or_404(
        clusters_with_kube_summary(
            visible(
                request.user,
                Cluster.objects.select_related(
                    "account",
                    "sriov",
                    "status",
                    "kube_observation",
                    "gpu_addon_state",
                    "gpu_use_state",
                ),
            )
        ).annotate(
            **_counts(machines, "pool__cluster", "phase", PHASE_IN, Phase.values),
            **_counts(nics, "cluster", "state", NICS_IN, PodNic.State.values),
        ),
        pk=pk,
    )


def _counts(
    rows: QuerySet[Any], group: str, field: str, prefix: str, values: list[str]
) -> dict[str, Coalesce]:
    """`<prefix><value>`: how many of the outer cluster's rows (grouped by `group`) have
    `field` = value, as subqueries of the cluster's row: read with it, no query apart."""
    grouped = rows.order_by().values(group)
    return {
        f"{prefix}{value}": Coalesce(
            Subquery(grouped.filter(**{field: value}).annotate(n=Count("pk")).values("n")), 0
        )
        for value in values
    }


@require_GET
def cluster_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    cluster = cluster_for_page(request, pk)
    context = cluster_body(request.user, cluster, request.GET).context()
    status = 200
    if not request.htmx:
        # The whole page draws its plan in place; a redraw of the body loads it apart.
        context.update(cluster_plan_section(cluster))
        # Money moves by the hour: drawn with the page, not with each refresh of its body
        # (whose URL keeps the window: page_url).
        money, status = money_section(
            request,
            cluster_reader(request, cluster),
            csv_url=lambda key: reverse("dashboard:cluster-money-csv", args=[cluster.pk, key]),
            api_query={"group_by": "pool", "account": str(cluster.account_id)},
        )
        context.update(money)
        context.update(cluster_gpu_use_section(cluster))
        locations = cluster_locations(request, cluster)
        context.update(
            cluster_cost_by_label_section(
                cluster, locations, request.GET, window=money["money"].window
            )
        )
    if context.get("cost_by_label_problem"):
        status = 400
    return page_or_fragment(
        request, "dashboard/cluster.html", context, fragments=["cluster-body"], status=status
    )


def cluster_cost_by_label_section(
    cluster: Cluster,
    locations: QuerySet[Location],
    params: QueryDict,
    *,
    window: Window | None,
) -> dict[str, Any]:
    """What the cluster cost over the page's window by the pod label `?label=` names
    (billing.selectors; none: the window was refused, the money section says why), and
    its GPU nodes' cost per hour now (billing.costs); or what is wrong with the key;
    nothing asked: the form alone."""
    key = params.get("label", "")
    section: dict[str, Any] = {
        "label_key": key,
        "cost_by_label_api": reverse("cluster-cost-by-label", args=[cluster.pk]),
    }
    if not key:
        return section
    try:
        section["cost_by_label"] = cost_by_label(key, cluster=cluster, locations=locations)
        if window is not None:
            section["cost_by_label_window"] = window
            section["cost_by_label_over"] = cost_by_label_over(
                key, cluster=cluster.pk, locations=locations, start=window.start, end=window.end
            )
            # The API's window: the page's bounds, whole steps of its step.
            asked = {"key": key, "start": f"{window.start:%Y-%m-%dT%H:%M:%SZ}",
                     "end": f"{window.end:%Y-%m-%dT%H:%M:%SZ}", "step": window.step}  # fmt: skip
            section["cost_by_label_over_query"] = urlencode(asked, safe=":")
    except LabelKeyInvalid as exc:
        section["cost_by_label_problem"] = str(exc)
    return section


def cluster_gpu_use_section(cluster: Cluster) -> dict[str, Any]:
    """What its GPUs do (kube.gpu_use): drawn with the page, as its money is."""
    return {
        "gpu_use": gpu_use(cluster, now=timezone.now()),
        "gpu_use_api": reverse("cluster-gpu-use", args=[cluster.pk]),
        "gpu_use_window": f"{settings.GPU_USE_WINDOW_HOURS:g}",
        "gpu_use_selector": settings.GPU_USE_EXPORTER_SELECTOR,
        "gpu_unused_percent": f"{settings.GPU_UNUSED_PERCENT:g}",
    }


def cluster_plan_section(cluster: Cluster) -> dict[str, Any]:
    """The cluster's plan (the next pass, a dry run) and its last passes, as recorded."""
    return {
        "cluster": cluster,
        "plan": cluster_plan(cluster, planners=(kube_plan,)),
        "passes": list(cluster_passes(cluster)[:PASSES_SHOWN]),
    }


@require_GET
def cluster_plan_fragment(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The plan on its own: loaded after each redraw of the cluster's body, so that a scale
    click or the body's poll does not plan the whole cluster."""
    cluster = get_object_or_404(visible(request.user, Cluster.objects.all()), pk=pk)
    return render(request, "dashboard/cluster.html#cluster-plan", cluster_plan_section(cluster))
