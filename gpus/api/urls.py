"""The API of GPU cards, on the one router of capvco_web.api_urls (vGPU reservations:
clusters.api)."""

from django.urls import path

from gpus.api import views

routes = [
    ("gpu-profiles", views.GpuProfileViewSet, None),
]
urlpatterns = [path("gpu-types/", views.GpuTypesView.as_view(), name="gpu-types")]
# Endpoints outside the router that the API root lists, by URL name.
listed = {"gpu-types": "gpu-types"}
