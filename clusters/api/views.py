"""Clusters, their sites and pools, and machines. Reads and writes the database only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import ErrorSerializer, ReasonSerializer
from clusters.api.serializers import (
    AccountSerializer,
    ClusterSerializer,
    ClusterSiteSerializer,
    DeleteReasonSerializer,
    LocationSerializer,
    MachinePoolSerializer,
    MachineSerializer,
    PlanStepSerializer,
)
from clusters.filtersets import (
    ClusterFilterSet,
    ClusterSiteFilterSet,
    LocationFilterSet,
    MachineFilterSet,
    MachinePoolFilterSet,
)
from clusters.models import Account, Cluster, ClusterSite, Location, Machine, MachinePool
from clusters.plan import cluster_plan
from clusters.services import (
    account_delete,
    cluster_delete,
    machine_force_delete,
    pool_delete,
    site_delete,
)


def _reason(
    request: Request, serializer_class: type[serializers.Serializer[Any]] = ReasonSerializer
) -> str:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return str(serializer.validated_data["reason"])


View = TypeVar("View", bound=Callable[..., Response])


def _delete_schema(in_use_by: str) -> Callable[[View], View]:
    return extend_schema(
        request=DeleteReasonSerializer,
        responses={
            204: None,
            409: OpenApiResponse(
                ErrorSerializer,
                description=f"Still in use by {in_use_by}: the detail names what is in "
                "the way and what to do.",
            ),
        },
    )


class AccountViewSet(viewsets.ModelViewSet[Account]):
    queryset = Account.objects.order_by("name")
    serializer_class = AccountSerializer

    @_delete_schema("its clusters, or by vGPU reservations not released")
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete an account with no cluster and no reservation still billed, with its
        locations and what was mirrored from them. Audited."""
        reason = _reason(request, DeleteReasonSerializer)
        account_delete(account=self.get_object(), actor=request.user, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)


class LocationViewSet(viewsets.ReadOnlyModelViewSet[Location]):
    queryset = Location.objects.order_by("account", "name")
    serializer_class = LocationSerializer
    filterset_class = LocationFilterSet


class ClusterViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Cluster],
):
    queryset = Cluster.objects.prefetch_related("sites").order_by("name")
    serializer_class = ClusterSerializer
    filterset_class = ClusterFilterSet

    @extend_schema(responses=PlanStepSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def plan(self, request: Request, pk: str | None = None) -> Response:
        """What the next reconcile pass would do (a dry run, from the database only)."""
        plan = cluster_plan(self.get_object())
        return Response(PlanStepSerializer(plan.steps, many=True).data)

    @extend_schema(request=ReasonSerializer, responses={202: ClusterSerializer})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete the cluster: its machines are torn down and every reservation with its
        prefix released; it stays `deleting`, with its blockers, until none is listed."""
        cluster = self.get_object()
        cluster_delete(cluster=cluster, actor=request.user, reason=_reason(request))
        return Response(ClusterSerializer(cluster).data, status=status.HTTP_202_ACCEPTED)


class ClusterSiteViewSet(viewsets.ModelViewSet[ClusterSite]):
    queryset = ClusterSite.objects.select_related("location").order_by("cluster", "location")
    serializer_class = ClusterSiteSerializer
    filterset_class = ClusterSiteFilterSet

    @_delete_schema("its pools")
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete a site with no pool left. Audited."""
        reason = _reason(request, DeleteReasonSerializer)
        site_delete(site=self.get_object(), actor=request.user, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MachinePoolViewSet(viewsets.ModelViewSet[MachinePool]):
    queryset = MachinePool.objects.order_by("cluster", "name")
    serializer_class = MachinePoolSerializer
    filterset_class = MachinePoolFilterSet

    @_delete_schema("its machines (scale it to 0 replicas first)")
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete a pool with no machine left: scale it to 0 replicas and wait for the
        teardown of its machines first. Audited."""
        reason = _reason(request, DeleteReasonSerializer)
        pool_delete(pool=self.get_object(), actor=request.user, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MachineViewSet(viewsets.ReadOnlyModelViewSet[Machine]):
    queryset = Machine.objects.select_related("pool__cluster").order_by("pool", "index")
    serializer_class = MachineSerializer
    filterset_class = MachineFilterSet

    @extend_schema(request=ReasonSerializer, responses={204: None})
    @action(detail=True, methods=["post"], url_path="force-delete")
    def force_delete(self, request: Request, pk: str | None = None) -> Response:
        """Drop the machine without teardown; its VM and vGPUs become orphans, reclaimed
        by name."""
        machine_force_delete(machine=self.get_object(), actor=request.user, reason=_reason(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
