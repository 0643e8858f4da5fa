"""Clusters, their sites, pools and machines, the VMs, vGPU reservations (whose release is
the machines' to decide), and what accounts and locations need of the clusters
(cloud.api.views has the rest of them). Reads and writes the database only. Each viewset
shows the objects of the caller's accounts and lets their role decide what they may do
(capvco_web.permissions); writes go through the audited services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models, transaction
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import (
    ErrorSerializer,
    KnownParametersMixin,
    ReasonSerializer,
    Refused,
    api_validation_error,
)
from capvco_web.api_input import CursorPagination
from capvco_web.permissions import AccountScopedViewSetMixin
from capvco_web.tasks import send_on_commit
from cloud.api import views as cloud_views
from cloud.api.views import changed
from cloud.models import VirtualMachine
from clusters.api.serializers import (
    ClusterSerializer,
    ClusterSiteSerializer,
    ConfirmedDeleteSerializer,
    DeleteReasonSerializer,
    GpuAddonSerializer,
    KubeconfigSerializer,
    LocationPlanStepSerializer,
    MachinePoolSerializer,
    MachineSerializer,
    PlanPassSerializer,
    PoolScaleSerializer,
    VirtualMachineSerializer,
)
from clusters.filtersets import (
    ClusterFilterSet,
    ClusterSiteFilterSet,
    MachineFilterSet,
    MachinePoolFilterSet,
    VirtualMachineFilterSet,
)
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.releases import location_plan, reservation_release_request, vm_removal_request
from clusters.selectors import cluster_passes, machines_with_vgpus
from clusters.services import (
    account_capi_kubeconfig_set,
    account_delete,
    cluster_create,
    cluster_delete,
    cluster_gpu_addon_set,
    cluster_kubeconfig_set,
    machine_delete,
    machine_force_delete,
    pool_create,
    pool_delete,
    pool_scale,
    pool_update,
    site_create,
    site_delete,
    site_update,
)
from clusters.tasks import orphan_sweep_location, reservation_release_task
from gpus.api.serializers import VgpuReservationSerializer
from gpus.filtersets import VgpuReservationFilterSet
from gpus.models import VgpuReservation
from gpus.services import ReleaseRefused


def _reason(
    request: Request, serializer_class: type[serializers.Serializer[Any]] = ReasonSerializer
) -> str:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return str(serializer.validated_data["reason"])


def _confirmed(request: Request) -> dict[str, str]:
    """The reason and the typed name of a delete that asks for both."""
    serializer = ConfirmedDeleteSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    return {
        "reason": str(serializer.validated_data["reason"]),
        "confirm": str(serializer.validated_data["confirm"]),
    }


View = TypeVar("View", bound=Callable[..., Response])
M = TypeVar("M", bound=models.Model)


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


class AccountViewSet(cloud_views.AccountViewSet):
    # What needs the clusters: deleting an account (refused while it has clusters or
    # reservations still billed) and its management cluster's kubeconfig.

    action_verbs = {"capi_kubeconfig": "change", "capi_kubeconfig_remove": "change"}

    @_delete_schema("its clusters, or by vGPU reservations not released")
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete an account with no cluster and no reservation still billed, with its
        locations and what was mirrored from them. Audited."""
        account = self.get_object()
        reason = _reason(request, DeleteReasonSerializer)
        account_delete(account=account, actor=request.user, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=KubeconfigSerializer, responses={204: None})
    @action(detail=True, methods=["put"], url_path="capi-kubeconfig")
    def capi_kubeconfig(self, request: Request, pk: str | None = None) -> Response:
        """Store the kubeconfig of a management cluster whose Cluster API clusters are
        imported into this account (write-only; audited with its server, never its
        secret). Another API server than before hands the clusters imported so far over."""
        serializer = KubeconfigSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            account_capi_kubeconfig_set(
                account=self.get_object(),
                kubeconfig=serializer.validated_data["kubeconfig"],
                actor=request.user,
                reason=serializer.validated_data["reason"],
            )
        except DjangoValidationError as exc:
            raise api_validation_error(exc, {"capi_kubeconfig": ("kubeconfig",)}) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=DeleteReasonSerializer, responses={204: None})
    @capi_kubeconfig.mapping.delete
    def capi_kubeconfig_remove(self, request: Request, pk: str | None = None) -> Response:
        """Stop importing: the clusters imported so far are managed here from now on
        (no longer read-only). Audited."""
        reason = _reason(request, DeleteReasonSerializer)
        account_capi_kubeconfig_set(
            account=self.get_object(), kubeconfig="", actor=request.user, reason=reason
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class LocationViewSet(cloud_views.LocationViewSet):
    # What needs the clusters: the plan of the location's orphan sweep.

    action_verbs = {"plan": "view"}

    @extend_schema(responses=LocationPlanStepSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def plan(self, request: Request, pk: str | None = None) -> Response:
        """What the next orphan sweep of the location would do: the releases people asked
        for, releases sent again, due orphan VMs and vGPUs (a dry run, from the database)."""
        plan = location_plan(self.get_object())
        return Response(LocationPlanStepSerializer(plan.steps, many=True).data)


class VirtualMachineViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[VirtualMachine]
):
    """The VMs listed in the cloudspaces of the clusters' sites, as last observed, with
    what they cost; those named by us that no machine owns are flagged orphaned, those
    made outside the control plane are `named_by_us: false` (`not_ours=true`)."""

    queryset = VirtualMachine.objects.select_related("location").order_by("location", "name")
    serializer_class = VirtualMachineSerializer
    filterset_class = VirtualMachineFilterSet
    pagination_class = CursorPagination  # a big list: keyset pages, in id order
    action_verbs = {"remove": "remove"}

    @extend_schema(
        request=ReasonSerializer,
        responses={
            202: VirtualMachineSerializer,
            409: OpenApiResponse(
                ErrorSerializer,
                description="Refused, saying why (a machine's VM: delete the machine; not "
                "named by us and changed since the last complete listing; asked for or "
                "removed already)",
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def remove(self, request: Request, pk: str | None = None) -> Response:
        """Ask for the removal of a VM that no machine owns, with a reason: recorded at
        once and audited; the location's next sweep (sent now) stops and deletes it,
        without the grace period automatic removal waits for. A VM not named by us (made
        outside the control plane) needs an admin of its account (403 otherwise), and a
        complete listing begun after it last changed; it is left alone if it changes
        before the sweep."""
        vm = self.get_object()
        reason = ReasonSerializer(data=request.data)
        reason.is_valid(raise_exception=True)
        try:
            vm_removal_request(vm=vm, actor=request.user, reason=reason.validated_data["reason"])
        except ReleaseRefused as exc:
            raise Refused(str(exc), code="removal_refused") from exc
        send_on_commit(orphan_sweep_location, vm.location_id)
        return Response(VirtualMachineSerializer(vm).data, status=status.HTTP_202_ACCEPTED)


class ClusterViewSet(
    KnownParametersMixin,
    AccountScopedViewSetMixin,
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Cluster],
):
    queryset = (
        Cluster.objects.select_related("status", "kube_observation", "gpu_addon_state")
        .prefetch_related("sites")
        .order_by("name")
    )
    serializer_class = ClusterSerializer
    filterset_class = ClusterFilterSet
    action_verbs = {
        "plan": "view",
        "passes": "view",
        "kubeconfig": "change",
        "kubeconfig_remove": "change",
        "gpu_addon": "change",
    }

    def perform_create(self, serializer: serializers.BaseSerializer[Cluster]) -> None:
        fields = dict(serializer.validated_data)
        kubeconfig = fields.pop("kubeconfig", "")
        with transaction.atomic():
            cluster = cluster_create(cluster=Cluster(**fields), actor=self.request.user)
            if kubeconfig:  # validated with the rest (Cluster.clean); audited by its server
                cluster_kubeconfig_set(
                    cluster=cluster, kubeconfig=kubeconfig, actor=self.request.user
                )
        serializer.instance = cluster

    @extend_schema(responses=PlanPassSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def passes(self, request: Request, pk: str | None = None) -> Response:
        """The last reconcile passes of the cluster and of its NICs, newest first: what each
        planned, what came of each step and why, how long planning and acting took
        (PLAN_PASSES_KEPT of each)."""
        return Response(PlanPassSerializer(cluster_passes(self.get_object()), many=True).data)

    @extend_schema(request=KubeconfigSerializer, responses={204: None})
    @action(detail=True, methods=["put"], url_path="kubeconfig")
    def kubeconfig(self, request: Request, pk: str | None = None) -> Response:
        """Store a new kubeconfig (write-only; audited with its server, never its secret)."""
        serializer = KubeconfigSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            cluster_kubeconfig_set(
                cluster=self.get_object(),
                kubeconfig=serializer.validated_data["kubeconfig"],
                actor=request.user,
                reason=serializer.validated_data["reason"],
            )
        except DjangoValidationError as exc:
            raise api_validation_error(exc) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=GpuAddonSerializer, responses={200: ClusterSerializer})
    @action(detail=True, methods=["put"], url_path="gpu-addon")
    def gpu_addon(self, request: Request, pk: str | None = None) -> Response:
        """Turn the GPU add-on (the NVIDIA device plugin in the cluster's Kubernetes) on
        or off; the next observe pass applies or removes it. Audited."""
        asked = GpuAddonSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        cluster_gpu_addon_set(
            cluster=self.get_object(),
            enabled=asked.validated_data["enabled"],
            actor=request.user,
            reason=asked.validated_data["reason"],
        )
        return Response(ClusterSerializer(self.get_object()).data)

    @extend_schema(request=DeleteReasonSerializer, responses={204: None})
    @kubeconfig.mapping.delete
    def kubeconfig_remove(self, request: Request, pk: str | None = None) -> Response:
        """Remove the kubeconfig: nodes and pods are no longer observed, and what was
        mirrored from them is dropped by the next observe tick. Audited."""
        reason = _reason(request, DeleteReasonSerializer)
        cluster_kubeconfig_set(
            cluster=self.get_object(), kubeconfig="", actor=request.user, reason=reason
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=ConfirmedDeleteSerializer,
        responses={
            202: ClusterSerializer,
            409: OpenApiResponse(
                ErrorSerializer,
                description="`confirm` is not the cluster's name (`fields.confirm` says it).",
            ),
        },
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete the cluster: its machines are torn down and every reservation with its
        prefix released; it stays `deleting`, with its blockers, until none is listed.
        `confirm` must be the cluster's name."""
        cluster = self.get_object()
        asked = _confirmed(request)
        cluster_delete(cluster=cluster, actor=request.user, **asked)
        return Response(ClusterSerializer(cluster).data, status=status.HTTP_202_ACCEPTED)


class ClusterSiteViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ModelViewSet[ClusterSite]
):
    queryset = ClusterSite.objects.select_related("location").order_by("cluster", "location")
    serializer_class = ClusterSiteSerializer
    filterset_class = ClusterSiteFilterSet

    def perform_create(self, serializer: serializers.BaseSerializer[ClusterSite]) -> None:
        site = ClusterSite(**serializer.validated_data)
        serializer.instance = site_create(site=site, actor=self.request.user)

    def perform_update(self, serializer: serializers.BaseSerializer[ClusterSite]) -> None:
        site_update(site=changed(serializer), actor=self.request.user)

    @_delete_schema("its pools")
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete a site with no pool left. Audited."""
        site = self.get_object()
        reason = _reason(request, DeleteReasonSerializer)
        site_delete(site=site, actor=request.user, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MachinePoolViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ModelViewSet[MachinePool]
):
    queryset = MachinePool.objects.select_related("target").order_by("cluster", "name")
    serializer_class = MachinePoolSerializer
    filterset_class = MachinePoolFilterSet
    action_verbs = {"scale": "scale"}

    def perform_create(self, serializer: serializers.BaseSerializer[MachinePool]) -> None:
        pool = MachinePool(**serializer.validated_data)
        serializer.instance = pool_create(pool=pool, actor=self.request.user)

    def perform_update(self, serializer: serializers.BaseSerializer[MachinePool]) -> None:
        pool_update(pool=changed(serializer), actor=self.request.user)

    @extend_schema(request=PoolScaleSerializer, responses={200: MachinePoolSerializer})
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str | None = None) -> Response:
        """Set the pool's replicas, with a reason: the reconciler creates the machines
        missing or tears the surplus down. What an operator may do to a pool."""
        pool = self.get_object()
        asked = PoolScaleSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        pool = pool_scale(
            pool=pool,
            replicas=asked.validated_data["replicas"],
            actor=request.user,
            reason=asked.validated_data["reason"],
        )
        return Response(MachinePoolSerializer(pool).data)

    @_delete_schema("its machines (scale it to 0 replicas first)")
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete a pool with no machine left: scale it to 0 replicas and wait for the
        teardown of its machines first. Audited."""
        pool = self.get_object()
        reason = _reason(request, DeleteReasonSerializer)
        pool_delete(pool=pool, actor=request.user, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MachineViewSet(
    KnownParametersMixin,
    AccountScopedViewSetMixin,
    mixins.DestroyModelMixin,
    viewsets.ReadOnlyModelViewSet[Machine],
):
    queryset = machines_with_vgpus(
        Machine.objects.select_related("pool__cluster", "deletion", "node_state").order_by(
            "pool", "index"
        )
    )
    serializer_class = MachineSerializer
    filterset_class = MachineFilterSet
    pagination_class = CursorPagination  # a big list: keyset pages, in id order
    action_verbs = {"force_delete": "force_delete"}

    @extend_schema(request=ReasonSerializer, responses={202: MachineSerializer})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Tear the machine down (its VM deleted, its vGPUs released), with a reason. The
        pool keeps its replicas: a new machine takes its place. Scale the pool down for
        fewer machines."""
        machine = self.get_object()
        machine = machine_delete(machine=machine, actor=request.user, reason=_reason(request))
        return Response(MachineSerializer(machine).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=ConfirmedDeleteSerializer, responses={204: None})
    @action(detail=True, methods=["post"], url_path="force-delete")
    def force_delete(self, request: Request, pk: str | None = None) -> Response:
        """Drop the machine without teardown; its VM and vGPUs become orphans, reclaimed
        by name. `confirm` must be the machine's name."""
        machine = self.get_object()
        machine_force_delete(machine=machine, actor=request.user, **_confirmed(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class VgpuReservationViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[VgpuReservation]
):
    queryset = VgpuReservation.objects.select_related("location", "listed").order_by(
        "location", "name"
    )
    serializer_class = VgpuReservationSerializer
    filterset_class = VgpuReservationFilterSet
    pagination_class = CursorPagination  # a big list: keyset pages, in id order
    action_verbs = {"release": "release"}

    @extend_schema(
        request=ReasonSerializer,
        responses={
            202: VgpuReservationSerializer,
            409: OpenApiResponse(
                ErrorSerializer,
                description="Refused, saying why and what to do instead (e.g. the GPU of a "
                "machine: scale its pool down or delete the machine)",
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """Ask for the reservation's release (detach, permanently), with a reason. The
        request is recorded on the row at once; a worker carries it out. One attached to a
        VM that no machine owns goes with that VM."""
        reservation = self.get_object()
        reason = ReasonSerializer(data=request.data)
        reason.is_valid(raise_exception=True)
        try:
            reservation_release_request(
                reservation=reservation, actor=request.user, reason=reason.validated_data["reason"]
            )
        except ReleaseRefused as exc:
            raise Refused(str(exc), code="release_refused") from exc
        send_on_commit(reservation_release_task, reservation.pk)
        return Response(
            VgpuReservationSerializer(reservation).data, status=status.HTTP_202_ACCEPTED
        )
