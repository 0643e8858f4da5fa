"""The API of clusters' sites, pools and machines, the VMs, and vGPU reservations (released
here, where machines are known), on the one router of capvco_web.api_urls; accounts and
locations too, extended with what needs the clusters (their plain API is cloud.api). The
clusters' own route is kube's (kube.api.urls): it lists them with their Kubernetes."""

from clusters.api import views

routes = [
    ("accounts", views.AccountViewSet, None),
    ("locations", views.LocationViewSet, None),
    ("vms", views.VirtualMachineViewSet, None),
    ("sites", views.ClusterSiteViewSet, None),
    ("pools", views.MachinePoolViewSet, None),
    ("machines", views.MachineViewSet, None),
    ("reservations", views.VgpuReservationViewSet, None),
]
