"""The API of clusters, their sites, pools, machines and Kubernetes, and the VMs, on the one
router of capvco_web.api_urls; accounts and locations too, extended with what needs the
clusters (their plain API is cloud.api)."""

from clusters.api import views

routes = [
    ("accounts", views.AccountViewSet, None),
    ("locations", views.LocationViewSet, None),
    ("vms", views.VirtualMachineViewSet, None),
    ("clusters", views.ClusterViewSet, None),
    ("sites", views.ClusterSiteViewSet, None),
    ("pools", views.MachinePoolViewSet, None),
    ("machines", views.MachineViewSet, None),
    ("nodes", views.KubeNodeViewSet, None),
    ("pods", views.KubePodViewSet, None),
]
