"""Clusters, their sites and pools, and machines. Reads and writes the database only."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import ReasonSerializer
from clusters.api.serializers import (
    AccountSerializer,
    ClusterSerializer,
    ClusterSiteSerializer,
    LocationSerializer,
    MachinePoolSerializer,
    MachineSerializer,
    PlanStepSerializer,
)
from clusters.filtersets import MachineFilterSet
from clusters.models import Account, Cluster, ClusterSite, Location, Machine, MachinePool
from clusters.plan import cluster_plan
from clusters.services import cluster_delete, machine_force_delete


def _reason(request: Request) -> str:
    serializer = ReasonSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    return str(serializer.validated_data["reason"])


class AccountViewSet(viewsets.ModelViewSet[Account]):
    queryset = Account.objects.order_by("name")
    serializer_class = AccountSerializer


class LocationViewSet(viewsets.ReadOnlyModelViewSet[Location]):
    queryset = Location.objects.order_by("account", "name")
    serializer_class = LocationSerializer
    filterset_fields = ["account", "name"]


class ClusterViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Cluster],
):
    queryset = Cluster.objects.prefetch_related("sites").order_by("name")
    serializer_class = ClusterSerializer
    filterset_fields = ["account", "state"]

    @extend_schema(responses=PlanStepSerializer(many=True))
    @action(detail=True, methods=["get"])
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
    filterset_fields = ["cluster", "location"]


class MachinePoolViewSet(viewsets.ModelViewSet[MachinePool]):
    queryset = MachinePool.objects.order_by("cluster", "name")
    serializer_class = MachinePoolSerializer
    filterset_fields = ["cluster", "site"]

    def perform_destroy(self, instance: MachinePool) -> None:
        # Dropping machine rows would skip their teardown and leak their vGPUs.
        if instance.machines.exists():
            raise ValidationError(
                {"replicas": "Scale the pool to 0 and wait for its machines to go first."}
            )
        instance.delete()


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
