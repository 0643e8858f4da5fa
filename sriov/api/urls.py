"""The API of SR-IOV NICs and the node agent's, on the one router of capvco_web.api_urls."""

from django.urls import path

from sriov.api import agent, views

routes = [
    ("sriov/clusters", views.SriovClusterViewSet, "sriov-cluster"),
    ("sriov/nics", views.PodNicViewSet, None),
    ("sriov/leaked-nics", views.LeakedNicViewSet, None),
    ("sriov/external-networks", views.ExternalNetworkViewSet, None),
]
urlpatterns = [
    path("sriov/queues/", views.VmQueueView.as_view(), name="sriov-queues"),
    path("sriov/agent/enroll/", agent.AgentEnrollView.as_view(), name="sriov-agent-enroll"),
    path("sriov/agent/nics/", agent.AgentNicsView.as_view(), name="sriov-agent-nics"),
    path("sriov/agent/gc/", agent.AgentGcView.as_view(), name="sriov-agent-gc"),
    path(
        "sriov/agent/nics/<str:pod_uid>/",
        agent.AgentNicView.as_view(),
        name="sriov-agent-nic",
    ),
]
