"""The REST API, version 1: one router for every app, the schema and its interactive page."""

from typing import Any

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.routers import APIRootView, DefaultRouter

from capvco_web.tokens_api import ApiTokenViewSet
from clusters.api import views as clusters
from gpus.api import views as gpus
from sriov.api import agent as sriov_agent
from sriov.api import views as sriov

# Endpoints outside the router, listed at the API root with the router's own.
NOT_ROUTED = {"gpu-types": "gpu-types", "schema": "api-schema", "docs": "api-docs"}


class ApiRootView(APIRootView):
    """Every endpoint of the API; `schema` is its OpenAPI description and `docs` the
    interactive page to try it."""

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().get(request, *args, **kwargs)
        for key, url_name in NOT_ROUTED.items():
            response.data[key] = reverse(url_name, request=request)
        return response


class Router(DefaultRouter):
    APIRootView = ApiRootView


router = Router()
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
    path(
        "docs/",
        # The page and the script that starts it are separate files: no inline script, as
        # the Content-Security-Policy wants; our template drops the inline style too.
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="api/docs.html"),
        name="api-docs",
    ),
    path("gpu-types/", gpus.GpuTypesView.as_view(), name="gpu-types"),
    path("sriov/queues/", sriov.VmQueueView.as_view(), name="sriov-queues"),
    path("sriov/agent/enroll/", sriov_agent.AgentEnrollView.as_view(), name="sriov-agent-enroll"),
    path("sriov/agent/nics/", sriov_agent.AgentNicsView.as_view(), name="sriov-agent-nics"),
    path("sriov/agent/gc/", sriov_agent.AgentGcView.as_view(), name="sriov-agent-gc"),
    path(
        "sriov/agent/nics/<str:pod_uid>/",
        sriov_agent.AgentNicView.as_view(),
        name="sriov-agent-nic",
    ),
    path("", include(router.urls)),
]
