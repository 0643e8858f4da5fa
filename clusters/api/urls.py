"""The API of accounts, their sites and clusters, on the one router of capvco_web.api_urls.
The clusters' own route is kube's (kube.api.urls): it lists them with their Kubernetes."""

from clusters.api import views

routes = [
    ("accounts", views.AccountViewSet, None),
    ("memberships", views.MembershipViewSet, None),
    ("locations", views.LocationViewSet, None),
    ("cloudspaces", views.CloudspaceViewSet, None),
    ("images", views.ImageViewSet, None),
    ("vms", views.VirtualMachineViewSet, None),
    ("sites", views.ClusterSiteViewSet, None),
    ("pools", views.MachinePoolViewSet, None),
    ("machines", views.MachineViewSet, None),
]
