"""The API of the Kubernetes mirror, on the one router of capvco_web.api_urls."""

from django.urls import path

from kube.api import views

routes = [
    ("clusters", views.ClusterViewSet, None),
    ("nodes", views.KubeNodeViewSet, None),
    ("pods", views.KubePodViewSet, None),
]
urlpatterns = [
    path("clusters/<int:pk>/gpu-use/", views.ClusterGpuUseView.as_view(), name="cluster-gpu-use"),
    path(
        "locations/<int:pk>/gpu-use/", views.LocationGpuUseView.as_view(), name="location-gpu-use"
    ),
]
