"""How a cluster's Kubernetes and its GPU add-on were observed is written by kube's
observers: it lives in kube's ClusterObservation and GpuAddonState now
(kube/migrations/0003_observed_cluster_state, which copies it first). The cluster keeps
what people want (`kubeconfig`, `gpu_addon`)."""

from django.db import migrations

MOVED = [
    "kube_observation_complete",
    "kube_observation_error",
    "kube_observation_started_at",
    "kube_last_complete_observation_at",
    "kube_nodes_resource_version",
    "kube_pods_resource_version",
    "gpu_addon_hash",
    "gpu_addon_applied_at",
    "gpu_addon_resource_version",
    "gpu_addon_error",
]


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0025_machine_node_flags_to_kube"),
    ]

    operations = [migrations.RemoveField(model_name="cluster", name=name) for name in MOVED]
