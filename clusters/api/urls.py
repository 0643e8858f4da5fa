"""The API of accounts, their sites and clusters, and vGPU reservations (released here), on
the one router of capvco_web.api_urls."""

from clusters.api import views

routes = [
    ("accounts", views.AccountViewSet, None),
    ("memberships", views.MembershipViewSet, None),
    ("locations", views.LocationViewSet, None),
    ("cloudspaces", views.CloudspaceViewSet, None),
    ("images", views.ImageViewSet, None),
    ("vms", views.VirtualMachineViewSet, None),
    ("clusters", views.ClusterViewSet, None),
    ("sites", views.ClusterSiteViewSet, None),
    ("pools", views.MachinePoolViewSet, None),
    ("machines", views.MachineViewSet, None),
    ("nodes", views.KubeNodeViewSet, None),
    ("pods", views.KubePodViewSet, None),
    ("reservations", views.VgpuReservationViewSet, None),
]
