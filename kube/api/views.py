"""The Kubernetes mirror in the API: nodes and pods, and the clusters with the summary
of their Kubernetes."""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import ErrorSerializer, KnownParametersMixin, ReasonSerializer, Refused
from capvco_web.api_csv import FORMAT_PARAMETER, CsvMixin
from capvco_web.api_input import CursorPagination
from capvco_web.permissions import AccountScopedViewSetMixin, visible
from cloud.models import Location
from clusters.api import views as clusters_views
from clusters.models import Cluster
from clusters.plan import cluster_plan
from kube.api.serializers import (
    ClusterPlanStepSerializer,
    GpuUseSerializer,
    KubeNodeSerializer,
    KubePodSerializer,
    LocationGpuUseSerializer,
)
from kube.filtersets import KubeNodeFilterSet, KubePodFilterSet
from kube.gpu_use import gpu_use, location_gpu_use
from kube.gpu_verify_requests import VerifyRefused, gpu_verify_request
from kube.models import KubeNode, KubePod
from kube.plan import kube_plan
from kube.selectors import (
    clusters_with_kube_summary,
    kube_nodes_with_requests,
    verifications_latest,
)


# Clusters, each with its Kubernetes as last observed (`kubernetes`), and the whole plan.
# (No docstring: the API's description of the list stays the one it had.)
class ClusterViewSet(clusters_views.ClusterViewSet):
    def get_queryset(self) -> QuerySet[Cluster]:
        return clusters_with_kube_summary(super().get_queryset())

    @extend_schema(responses=ClusterPlanStepSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def plan(self, request: Request, pk: str | None = None) -> Response:
        """What the next reconcile pass would do (a dry run, from the database only)."""
        plan = cluster_plan(self.get_object(), planners=(kube_plan,))
        return Response(ClusterPlanStepSerializer(plan.shown, many=True).data)


class KubeNodeViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[KubeNode]
):
    """Kubernetes nodes of the clusters with a kubeconfig, as last observed."""

    queryset = KubeNode.objects.select_related("cluster").order_by("cluster__name", "name")
    serializer_class = KubeNodeSerializer
    filterset_class = KubeNodeFilterSet
    pagination_class = CursorPagination  # a big list: keyset pages, in id order
    action_verbs = {"verify": "verify"}

    def get_queryset(self) -> QuerySet[KubeNode]:
        return verifications_latest(kube_nodes_with_requests(super().get_queryset()))

    @extend_schema(
        request=ReasonSerializer,
        responses={
            202: KubeNodeSerializer,
            409: OpenApiResponse(
                ErrorSerializer,
                description="Refused, saying why (not a node of a GPU pool, no GPU advertised, "
                "a verification running or asked for already, verification off)",
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def verify(self, request: Request, pk: str | None = None) -> Response:
        """Ask for the node's GPUs to be verified again, with a reason: a Job pinned to it
        holds all its GPUs and runs nvidia-smi; the verdict follows within a pass or two."""
        node = self.get_object()
        reason = ReasonSerializer(data=request.data)
        reason.is_valid(raise_exception=True)
        try:
            gpu_verify_request(
                node=node, actor=request.user, reason=reason.validated_data["reason"]
            )
        except VerifyRefused as exc:
            raise Refused(str(exc), code="verify_refused") from exc
        return Response(
            KubeNodeSerializer(self.get_queryset().get(pk=node.pk)).data,
            status=status.HTTP_202_ACCEPTED,
        )


class KubePodViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[KubePod]
):
    """Kubernetes pods of the clusters with a kubeconfig, as last observed."""

    queryset = KubePod.objects.select_related("cluster").order_by(
        "cluster__name", "namespace", "name"
    )
    serializer_class = KubePodSerializer
    filterset_class = KubePodFilterSet
    pagination_class = CursorPagination  # a big list: keyset pages, in id order


class ClusterGpuUseView(CsvMixin, KnownParametersMixin, generics.GenericAPIView[Cluster]):
    """What a cluster's GPUs do, as NVIDIA's dcgm-exporter in the cluster shows it, over
    the last GPU_USE_WINDOW_HOURS: per GPU (`results`; as CSV, those rows), and the
    efficiency (used GPU-time over GPU-time held by pods) of the cluster, per namespace
    and per pool. `has_data` false: no GPU use data, which is not 0 %."""

    queryset = Cluster.objects.select_related("gpu_use_state")
    pagination_class = None
    csv_name = "gpu-use"

    @extend_schema(
        parameters=[FORMAT_PARAMETER],
        responses={
            (200, "application/json"): GpuUseSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
            404: OpenApiResponse(ErrorSerializer, description="No such cluster the user sees"),
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        cluster = get_object_or_404(visible(request.user, self.get_queryset()), pk=pk)
        return Response(GpuUseSerializer(gpu_use(cluster, now=timezone.now())).data)


class LocationGpuUseView(CsvMixin, KnownParametersMixin, generics.GenericAPIView[Location]):
    """What the GPUs in a location do, as NVIDIA's dcgm-exporter of each cluster shows it,
    over the last GPU_USE_WINDOW_HOURS: a GPU is in the location of its node's machine (a
    cluster spans locations, a machine does not). Per cluster (`results`; as CSV, those
    rows) its GPUs there as its last read kept them, and summed: GPUs in use, requested
    but unused and idle, and the efficiency (used GPU-time over GPU-time held by pods).
    `has_data` false: no GPU use data, which is not 0 %."""

    queryset = Location.objects.all()
    pagination_class = None
    csv_name = "location-gpu-use"

    @extend_schema(
        parameters=[FORMAT_PARAMETER],
        responses={
            (200, "application/json"): LocationGpuUseSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
            404: OpenApiResponse(ErrorSerializer, description="No such location the user sees"),
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        location = get_object_or_404(visible(request.user, self.get_queryset()), pk=pk)
        clusters = visible(request.user, Cluster.objects.all())
        return Response(
            LocationGpuUseSerializer(location_gpu_use(location, clusters=clusters)).data
        )
