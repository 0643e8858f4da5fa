"""The money endpoints: what the caller's accounts cost now and over time, the month to
date with its forecast, and the leak ledger. Read-only, each scoped to the caller's
accounts; JSON or CSV. The figures are billing.selectors' and billing.costs'."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, viewsets
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from billing.api.serializers import (
    CostByLabelHistorySerializer,
    CostByLabelSerializer,
    CostRowSerializer,
    CostSeriesSerializer,
    IdleSpellSerializer,
    LeakSerializer,
    LeakSummarySerializer,
    MonthFigureSerializer,
)
from billing.costs import GROUP_BY, LabelKeyInvalid, cost_by_label, costs_by
from billing.filtersets import CostFilterSet, IdleSpellFilterSet, LeakFilterSet
from billing.models import IdleSpell, Leak
from billing.rollups import month_of
from billing.selectors import (
    SERIES_STEPS,
    cost_by_label_over,
    cost_history,
    leak_totals,
    month_figures,
    series_bounds,
    step_after,
    step_start,
)
from billing.windows import PRESETS, preset, window_problem
from capvco_web.api import DateTimeText, ErrorSerializer, KnownParametersMixin
from capvco_web.api_csv import FORMAT_PARAMETER, CsvMixin
from capvco_web.api_input import CursorPagination, query_parameter_once
from capvco_web.api_schema import ApiSchema
from capvco_web.integrations.kube import LABEL_KEY_MAX, LABEL_KEY_PATTERN
from capvco_web.permissions import AccountScopedViewSetMixin, visible
from cloud.models import Location
from clusters.models import Cluster

HISTORY_PARAMETERS = ("window", "start", "end", "step")
Row = TypeVar("Row")


def _group_by(request: Request, choices: tuple[str, ...]) -> str:
    group_by = request.query_params.getlist("group_by") or [choices[0]]
    if len(group_by) > 1 or group_by[0] not in choices:
        given = ", ".join(group_by)
        raise serializers.ValidationError(
            {"group_by": [f"Give one of {', '.join(choices)} (not {given})."]}
        )
    return group_by[0]


class _StepQuery(serializers.Serializer[object]):
    step = serializers.ChoiceField(choices=SERIES_STEPS, default="day")


class _SeriesQuery(_StepQuery):
    start = DateTimeText()
    end = DateTimeText(required=False)


class _PeriodQuery(serializers.Serializer[object]):
    since = DateTimeText(required=False)
    until = DateTimeText(required=False)


def _query(request: Request, serializer_class: type[serializers.Serializer[Any]]) -> Any:
    """The query parameters a serializer reads, each given once, validated by it."""
    names = serializer_class().fields.keys()
    given = {n: value for n in names if (value := query_parameter_once(request, n)) is not None}
    query = serializer_class(data=given)
    query.is_valid(raise_exception=True)
    return query.validated_data


_GROUP_BY_PARAMETER = OpenApiParameter(
    "group_by",
    str,
    enum=list(GROUP_BY),
    default="account",
    description="One row per account, location, cluster, pool or namespace (and currency)",
)


class CostsSchema(ApiSchema):
    """The costs answer a list of rates now, or a series (an object) when asked for one."""

    over_time: type[serializers.Serializer[object]] = CostSeriesSerializer

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        json = "application/json"
        answer = operation["responses"]["200"]["content"][json]
        series = self.resolve_serializer(self.over_time(), "response").ref
        answer["schema"] = {"oneOf": [answer["schema"], series]}
        return operation


class CostByLabelSchema(CostsSchema):
    """Cost by label answers the rates now, or a window's totals when asked for one."""

    over_time = CostByLabelHistorySerializer


_START_PARAMETER = OpenApiParameter(
    "start",
    OpenApiTypes.DATETIME,
    description="Asks for the series: the first step's start (ISO 8601, UTC; "
    "the start of an hour, a day or a month as `step` says)",
)
_END_PARAMETER = OpenApiParameter(
    "end",
    OpenApiTypes.DATETIME,
    description="The series' end, exclusive (ISO 8601, UTC; a step's start). "
    "Left out: the end of the step now running. Only with `start`",
)
_STEP_PARAMETER = OpenApiParameter(
    "step",
    str,
    enum=list(SERIES_STEPS),
    # No `default` in the schema: a client sends a parameter's default as given,
    # and `step` without `start` is refused.
    description="The series' step: an hour, a UTC day or a UTC calendar month "
    "(left out: `day`). Only with `start`",
)


_WINDOW_PARAMETER = OpenApiParameter(
    "window",
    str,
    enum=list(PRESETS),
    description="Asks for the series over a window the pages offer, in whole steps up to "
    "the one now running (as the dashboard's picker: `7d` by the hour is the last 168 "
    "hours, this one included; `month` is this calendar month, UTC). Instead of `start` "
    "and `end`; with `step`",
)


def _window(request: Request) -> dict[str, Any] | None:
    """[start, end) and the step a request asks for over time (None: asks for now), from
    `start` (and `end`) or a `window` the pages offer (billing.windows.PRESETS). Refused
    (400 naming the parameter): a window with a start or an end, a window not offered,
    `end` or `step` without `start` or a window, and what series_bounds refuses."""
    if not any(name in request.query_params for name in HISTORY_PARAMETERS):
        return None
    now = timezone.now()
    name = query_parameter_once(request, "window")
    if name is not None:
        given = "start" in request.query_params or "end" in request.query_params
        if problem := window_problem(name, bounds_given=given):
            raise serializers.ValidationError({"window": [problem]})
        step = _query(request, _StepQuery)["step"]
        if step == "month" and PRESETS[name][1] is not None:
            raise serializers.ValidationError(
                {"step": [f"The window {name} is not whole months: give hour or day."]}
            )
        window = preset(name, step, now)
        start, end = window.start, window.end
    elif "start" not in request.query_params:
        raise serializers.ValidationError(
            {"start": ["Give the series' start with end and step, or a window."]}
        )
    else:
        query = _query(request, _SeriesQuery)
        step, start = query["step"], query["start"]
        end = query.get("end") or step_after(step, step_start(step, now))
    series_bounds(step=step, start=start, end=end, now=now)
    return {"start": start, "end": end, "step": step}


class CostsView(CsvMixin, KnownParametersMixin, generics.GenericAPIView[Location]):
    """What the caller's accounts cost, at whitesky's own prices (a month is 730 h), one
    row per group and currency: machines' vCPUs and memory (`compute`) and their billed
    vGPUs (`vgpu`, of which `idle` is the part attached to nodes that no pod requests),
    orphaned vGPUs and orphan VMs per account and location. Namespaces share their nodes'
    vGPUs by request (OpenCost's rule), the idle rest on a row of its own. Not counted:
    disks and IOPS (the VM listing does not carry them), public IPs, and NICs (whitesky's
    prices have no unit per NIC).

    Without `start`: per hour, now (a list of rows). With `start` (and `end`, `step`):
    what each group cost per step over [start, end), from the hourly rollups (an object,
    its rows in `results`): each hour's rate sampled once, summed over the step; an hour
    no pass sampled adds nothing (`hours_sampled`). Refused (400, naming the parameter):
    a bound that is not the start of a step, an end not after the start, a range over
    731 days or answering over 10,000 rows, and for `step=hour` a start before the hours
    kept (COST_HOURLY_HISTORY_DAYS).
    """

    queryset = Location.objects.all()
    filterset_class = CostFilterSet
    pagination_class = None  # one row per group (and step): all of them, bounded
    query_parameters = ("group_by", *HISTORY_PARAMETERS)
    csv_name = "costs"
    schema = CostsSchema()

    @extend_schema(
        parameters=[
            FORMAT_PARAMETER,
            _GROUP_BY_PARAMETER,
            _WINDOW_PARAMETER,
            _START_PARAMETER,
            _END_PARAMETER,
            _STEP_PARAMETER,
        ],
        responses={
            # Or a series: CostsSchema says both.
            (200, "application/json"): CostRowSerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
    def get(self, request: Request) -> Response:
        group_by = cast(Any, _group_by(request, GROUP_BY))
        locations = self.filter_queryset(visible(request.user, self.get_queryset()))
        window = _window(request)
        if window is None:
            return Response(CostRowSerializer(costs_by(group_by, locations), many=True).data)
        series = cost_history(group_by=group_by, locations=locations, now=timezone.now(), **window)
        return Response(CostSeriesSerializer(series).data)


class CostsMonthView(CsvMixin, KnownParametersMixin, generics.GenericAPIView[Location]):
    """The calendar month (UTC) of each account or cluster, per currency: what it cost so
    far (the hours sampled, summed), the rate now, the rate its pools' replicas imply (each
    missing or surplus machine at its pool's list price), and the forecast: spent plus the
    planned rate until the month's end. A cluster deleted this month keeps its row, at a
    rate of 0."""

    queryset = Location.objects.all()
    filterset_class = CostFilterSet
    pagination_class = None
    query_parameters = ("group_by",)
    csv_name = "costs-month"

    @extend_schema(
        parameters=[
            FORMAT_PARAMETER,
            OpenApiParameter(
                "group_by",
                str,
                enum=["account", "cluster"],
                default="account",
                description="One row per account or per cluster (and currency)",
            ),
        ],
        responses={
            (200, "application/json"): MonthFigureSerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
    def get(self, request: Request) -> Response:
        group_by = cast(Any, _group_by(request, ("account", "cluster")))
        locations = self.filter_queryset(visible(request.user, self.get_queryset()))
        figures = month_figures(group_by=group_by, locations=locations, now=timezone.now())
        return Response(MonthFigureSerializer(figures, many=True).data)


class LeakViewSet(
    CsvMixin, KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[Leak]
):
    """The leak ledger: every vGPU and VM whitesky billed that no machine of ours owned,
    from flagged to ended (released, gone, or owned again), with what it cost; the record
    stays after it ended (COST_HISTORY_DAYS). As CSV, every row the filters select, not a
    page."""

    queryset = Leak.objects.select_related("account", "location").order_by("pk")
    serializer_class = LeakSerializer
    filterset_class = LeakFilterSet
    pagination_class = CursorPagination  # kept for a year: keyset pages, in id order
    csv_name = "leaks"

    def paginate_queryset(self, queryset: QuerySet[Any, Row] | Sequence[Row]) -> list[Row] | None:
        # `cursor` and `limit` are checked alike, but a download is every row the filters
        # select, not a page.
        page = super().paginate_queryset(queryset)
        return None if self.request.accepted_renderer.format == "csv" else page

    @extend_schema(
        parameters=[FORMAT_PARAMETER],
        responses={
            (200, "application/json"): LeakSerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        parameters=[FORMAT_PARAMETER],
        responses={
            (200, "application/json"): LeakSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)


class LeakSummaryView(CsvMixin, KnownParametersMixin, generics.GenericAPIView[Leak]):
    """Per account and currency: what the leaks (filtered as the ledger is) cost within
    [since, until), how many are still open, and how many ended within it. JSON only: its
    totals are not the rows of the list the filters select."""

    queryset = Leak.objects.select_related("account").order_by("pk")
    filterset_class = LeakFilterSet
    pagination_class = None
    # No CSV: an unknown format is still refused naming it.
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]
    query_parameters = ("since", "until")

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "since",
                OpenApiTypes.DATETIME,
                description="The period's start (ISO 8601; left out: this month's start, UTC)",
            ),
            OpenApiParameter(
                "until",
                OpenApiTypes.DATETIME,
                description="The period's end, exclusive (ISO 8601; left out: now)",
            ),
        ],
        responses={200: LeakSummarySerializer},
    )
    def get(self, request: Request) -> Response:
        now = timezone.now()
        query = _query(request, _PeriodQuery)
        since: datetime = query.get("since", month_of(now))
        until: datetime = query.get("until", now)
        if until <= since:
            raise serializers.ValidationError({"until": ["Give an until after since."]})
        leaks = self.filter_queryset(visible(request.user, self.get_queryset()))
        totals = leak_totals(leaks=leaks, since=since, until=until)
        return Response(
            LeakSummarySerializer({"since": since, "until": until, "totals": totals}).data
        )


class IdleSpellViewSet(
    CsvMixin,
    KnownParametersMixin,
    AccountScopedViewSetMixin,
    viewsets.ReadOnlyModelViewSet[IdleSpell],
):
    """Since when GPUs are idle: each GPU node whose attached vGPUs no pending or running
    pod asks for, opened by the money pass from a complete Kubernetes observation, ended
    when a pod asks for them (or the node has none attached); with what the idle GPUs cost
    per hour and since the spell began. Filter by `cluster_id` or `pool_id` for a pool's
    or a cluster's; `open=true` for the GPUs idle now."""

    queryset = IdleSpell.objects.select_related("account", "location").order_by("pk")
    serializer_class = IdleSpellSerializer
    filterset_class = IdleSpellFilterSet
    pagination_class = CursorPagination
    csv_name = "idle-gpus"


class ClusterCostByLabelView(CsvMixin, KnownParametersMixin, generics.GenericAPIView[Cluster]):
    """What a cluster's GPU nodes cost per hour now, attributed by the value of the pod
    label `key` (OpenCost's rule, as `/costs/?group_by=namespace` splits them per
    namespace): the pending and running pods of each value share a node's attached vGPUs
    by the GPUs they request; the pods without the label get a row of their own (`value`
    null, `name` "(no label)"); the GPUs no pod requests are idle, on a row of their own
    (`idle` true), never spread over the pods. A row per value and currency (as CSV, those
    rows). The labels are the pods' as the Kubernetes mirror last saw them.

    With `start` (and `end`, `step`, as `/costs/` takes them): what the cluster cost over
    [start, end), by value: each value's shares summed over the hours sampled (the labels
    each hour's sample saw; any key, asked later), the pods without the label and the idle
    GPUs as above, and what the cluster cost besides on a row of its own (`not_attributed`:
    its machines' vCPUs and memory, billed vGPUs on no GPU node), so that the rows add up
    to what the cluster cost over the window (an object, its rows in `results`).
    """

    queryset = Cluster.objects.all()
    pagination_class = None
    query_parameters = ("key", *HISTORY_PARAMETERS)
    csv_name = "cost-by-label"
    schema = CostByLabelSchema()

    @extend_schema(
        parameters=[
            FORMAT_PARAMETER,
            OpenApiParameter(
                "key",
                {"type": "string", "pattern": LABEL_KEY_PATTERN, "maxLength": LABEL_KEY_MAX},
                required=True,
                description="A pod label key (`team`, `example.com/project`): an optional "
                "DNS subdomain prefix and `/`, then a name of 1 to 63 letters, digits, `-`, "
                "`_` and `.`; anything else is refused (400) naming the problem",
            ),
            _WINDOW_PARAMETER,
            _START_PARAMETER,
            _END_PARAMETER,
            _STEP_PARAMETER,
        ],
        responses={
            # Or a window's totals: CostByLabelSchema says both.
            (200, "application/json"): CostByLabelSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
            404: OpenApiResponse(ErrorSerializer, description="No such cluster the user sees"),
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        cluster = get_object_or_404(visible(request.user, self.get_queryset()), pk=pk)
        key = query_parameter_once(request, "key") or ""
        locations = visible(request.user, Location.objects.filter(account_id=cluster.account_id))
        window = _window(request)
        try:
            if window is not None:
                totals = cost_by_label_over(
                    key,
                    cluster=cluster.pk,
                    locations=locations,
                    start=window["start"],
                    end=window["end"],
                )
                return Response(CostByLabelHistorySerializer(totals).data)
            rows = cost_by_label(key, cluster=cluster, locations=locations)
        except LabelKeyInvalid as exc:
            raise serializers.ValidationError({"key": [str(exc)]}) from exc
        return Response(CostByLabelSerializer({"key": key, "results": rows}).data)
