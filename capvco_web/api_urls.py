"""The REST API, version 1: one router for every app."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from capvco_web.tokens_api import ApiTokenViewSet
from clusters.api import views as clusters
from gpus.api import views as gpus
from sriov.api import agent as sriov_agent
from sriov.api import views as sriov

router = DefaultRouter()
router.register("accounts", clusters.AccountViewSet)
router.register("memberships", clusters.MembershipViewSet)
router.register("locations", clusters.LocationViewSet)
router.register("cloudspaces", clusters.CloudspaceViewSet)
router.register("images", clusters.ImageViewSet)
router.register("clusters", clusters.ClusterViewSet)
router.register("sites", clusters.ClusterSiteViewSet)
router.register("pools", clusters.MachinePoolViewSet)
router.register("machines", clusters.MachineViewSet)
router.register("nodes", clusters.KubeNodeViewSet)
router.register("pods", clusters.KubePodViewSet)
router.register("gpu-profiles", gpus.GpuProfileViewSet)
router.register("reservations", gpus.VgpuReservationViewSet)
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("sriov/clusters", sriov.SriovClusterViewSet, basename="sriov-cluster")
router.register("sriov/nics", sriov.PodNicViewSet)
router.register("sriov/leaked-nics", sriov.LeakedNicViewSet)
router.register("sriov/external-networks", sriov.ExternalNetworkViewSet)

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("gpu-types/", gpus.GpuTypesView.as_view(), name="gpu-types"),
    path("sriov/queues/", sriov.VmQueueView.as_view(), name="sriov-queues"),
    path("sriov/agent/nics/", sriov_agent.AgentNicsView.as_view(), name="sriov-agent-nics"),
    path(
        "sriov/agent/nics/<str:pod_uid>/",
        sriov_agent.AgentNicView.as_view(),
        name="sriov-agent-nic",
    ),
    path("", include(router.urls)),
]
