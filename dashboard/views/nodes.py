"""Kubernetes nodes of the clusters as last observed: what each advertises and runs, its
machine, and what the mirror flagged; with `flag=node-missing`, the machines whose node
never joined or left. The filters are the API's (`dashboard.filtersets`); the nodes'
columns shown are the operator's choice (`cols`), and the list is saved as a view."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse, QueryDict
from django.urls import reverse
from django.views.decorators.http import require_GET

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import CURSOR_PARAMS, BadCursor, Sort, keyset_page
from capvco_web.permissions import visible
from cloud.models import Location
from clusters.filtersets import MachineFilterSet
from clusters.models import Cluster, Machine
from dashboard.columns import COLUMNS, columns_chosen
from dashboard.filtersets import (
    NodeListFilterSet,
    cluster_field,
    filled,
    list_page,
    only,
    unknown_parameters,
)
from dashboard.forms import LocationChoiceField, NodeFilterForm
from dashboard.lists import NODE_COLUMNS
from dashboard.selectors import NodeRow, node_rows
from dashboard.views.saved import saved_views_context
from kube.models import KubeNode, KubePod
from kube.selectors import kube_nodes_with_requests, verifications_latest

TEMPLATE = "dashboard/nodes.html"
PAGE_SIZE = 50
BY_NAME = Sort("name", False, "name")


def node_filterset(
    request: HtmxHttpRequest, params: QueryDict, shown: frozenset[str]
) -> NodeListFilterSet:
    """The filters over the nodes the user sees; the clusters and locations offered are
    theirs too. A node's cluster and machine are read for their columns only."""
    nodes = visible(request.user, KubeNode.objects.all())
    if joined := [name for name in ("cluster", "machine") if name in shown]:
        nodes = nodes.select_related(*joined)  # none named: every relation, not none
    filterset = NodeListFilterSet(filled(params), queryset=nodes, request=request)
    fields = filterset.form.fields
    fields["cluster"] = cluster_field(visible(request.user, Cluster.objects.all()))
    fields["location"] = LocationChoiceField(
        visible(request.user, Location.objects.order_by("name")),
        required=False,
        empty_label="any",
    )
    return filterset


def _machines_without_node(request: HtmxHttpRequest, params: QueryDict) -> QuerySet[Machine]:
    """The machines whose node is missing, by the filters machines and nodes share (their
    cluster, pool, location, account: the same names on both)."""
    machines = visible(
        request.user,
        Machine.objects.filter(node_state__missing=True).select_related(
            "pool__cluster", "pool__site__location", "node_state"
        ),
    )
    shared = set(MachineFilterSet.base_filters) & set(NodeListFilterSet.base_filters)
    return MachineFilterSet(only(filled(params), shared), queryset=machines).qs


def _nodes(nodes: QuerySet[KubeNode], shown: frozenset[str]) -> QuerySet[KubeNode]:
    """The nodes with what their columns shown need: the GPUs their pods request (for
    the pods using GPUs too: only a node with requests has them looked up), the latest
    verification of their GPUs."""
    if {"requested", "pods"} & shown:
        nodes = kube_nodes_with_requests(nodes)
    return verifications_latest(nodes) if "verified" in shown else nodes


def node_table(request: HtmxHttpRequest, params: QueryDict) -> tuple[dict[str, Any], int]:
    """The list as `params` asks for it, and the status to answer."""
    chosen = columns_chosen(params, NODE_COLUMNS)
    filterset = node_filterset(request, params, chosen.keys)
    list_url = reverse("dashboard:nodes")
    context: dict[str, Any] = {
        "form": filterset.form,
        "chosen": chosen,
        "shown": chosen.keys,
        "params": params,
        "list_url": list_url,
        "page_url": f"{list_url}?{params.urlencode()}" if params else list_url,
        "errors": [],
        "rows": [],
        "machines": [],
        "page": None,
        "node_missing": False,
        **saved_views_context(request, "nodes", params),
    }
    if unknown := unknown_parameters(params, [*filterset.filters, COLUMNS, *CURSOR_PARAMS]):
        context["errors"] += unknown
        return context, 400
    if chosen.errors:
        context["errors"] += chosen.errors
        return context, 400
    if not filterset.is_valid():
        for field, messages in filterset.form.errors.items():
            context["errors"] += [f"{field}: {message}" for message in messages]
        return context, 400
    data = filterset.form.cleaned_data
    try:
        if data["flag"] == NodeFilterForm.NODE_MISSING:
            context["node_missing"] = True
            machines = keyset_page(
                _machines_without_node(request, params), sort=BY_NAME, params=params, size=PAGE_SIZE
            )
            context["page"], context["machines"] = machines, machines.rows
        else:
            nodes = keyset_page(
                _nodes(filterset.qs, chosen.keys), sort=BY_NAME, params=params, size=PAGE_SIZE
            )
            context["page"] = nodes
            context["rows"] = (
                node_rows(nodes.rows, visible(request.user, KubePod.objects.all()))
                if "pods" in chosen.keys
                else [NodeRow(node, [], 0) for node in nodes.rows]
            )
    except BadCursor as exc:
        context["errors"].append(str(exc))
        return context, 400
    return context, 200


@require_GET
@list_page(NodeListFilterSet)
def node_list(request: HtmxHttpRequest) -> HttpResponse:
    context, status = node_table(request, request.GET)
    return page_or_fragment(request, TEMPLATE, context, fragments=["node-table"], status=status)
