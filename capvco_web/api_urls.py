"""The REST API, version 1: one router for every app, the schema and its interactive page.

Each app's API module (`API_MODULES`, named, not imported here) gives its router `routes`
(prefix, viewset, basename), its other `urlpatterns` if it has any, and the endpoints
among those the root lists (`listed`: key -> URL name)."""

from importlib import import_module
from typing import Any

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.routers import APIRootView, DefaultRouter

from capvco_web.audit_api import AuditEventViewSet
from capvco_web.tokens_api import ApiTokenViewSet

API_MODULES = [
    "cloud.api.urls",
    "clusters.api.urls",
    "kube.api.urls",
    "gpus.api.urls",
    "sriov.api.urls",
    "billing.api.urls",
    "dashboard.api.urls",
]
_apis = [import_module(name) for name in API_MODULES]

# Endpoints outside the router, listed at the API root with the router's own.
NOT_ROUTED = {
    **{key: name for api in _apis for key, name in getattr(api, "listed", {}).items()},
    "schema": "api-schema",
    "docs": "api-docs",
}


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
for api in _apis:
    for prefix, viewset, basename in api.routes:
        router.register(prefix, viewset, basename=basename)
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("audit", AuditEventViewSet, basename="audit-event")

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "docs/",
        # The page and the script that starts it are separate files: no inline script, as
        # the Content-Security-Policy wants; our template drops the inline style too.
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="api/docs.html"),
        name="api-docs",
    ),
    *(path("", include(api.__name__)) for api in _apis if getattr(api, "urlpatterns", None)),
    path("", include(router.urls)),
]
