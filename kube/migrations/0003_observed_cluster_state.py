"""A cluster's observed Kubernetes state (how it was last listed, the resourceVersions
mirrored) and what it holds of the GPU add-on move off the cluster
(clusters/migrations/0026) into rows of their writers; copied before the cluster's fields
go, and back when undone."""

import hashlib
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

OBSERVATION = {
    "complete": "kube_observation_complete",
    "error": "kube_observation_error",
    "started_at": "kube_observation_started_at",
    "last_complete_at": "kube_last_complete_observation_at",
    "nodes_resource_version": "kube_nodes_resource_version",
    "pods_resource_version": "kube_pods_resource_version",
}
ADDON = {
    "hash": "gpu_addon_hash",
    "applied_at": "gpu_addon_applied_at",
    "resource_version": "gpu_addon_resource_version",
    "error": "gpu_addon_error",
}


def _sha256(kubeconfig: str) -> str:
    return hashlib.sha256(kubeconfig.encode()).hexdigest()


def states_to_kube(apps: Any, schema_editor: Any) -> None:
    observation = apps.get_model("kube", "ClusterObservation")
    addon = apps.get_model("kube", "GpuAddonState")
    for cluster in apps.get_model("clusters", "Cluster").objects.iterator():
        observed = {new: getattr(cluster, old) for new, old in OBSERVATION.items()}
        if observed["started_at"] is not None or observed["error"]:
            # The resourceVersions were listed with the kubeconfig it holds (a new one
            # cleared them).
            observation.objects.create(
                cluster_id=cluster.pk, kubeconfig_sha256=_sha256(cluster.kubeconfig), **observed
            )
        held = {new: getattr(cluster, old) for new, old in ADDON.items()}
        if any(held.values()):
            addon.objects.create(cluster_id=cluster.pk, **held)


def states_to_clusters(apps: Any, schema_editor: Any) -> None:
    clusters = apps.get_model("clusters", "Cluster").objects
    for row in apps.get_model("kube", "ClusterObservation").objects.iterator():
        clusters.filter(pk=row.cluster_id).update(
            **{old: getattr(row, new) for new, old in OBSERVATION.items()}
        )
    for row in apps.get_model("kube", "GpuAddonState").objects.iterator():
        clusters.filter(pk=row.cluster_id).update(
            **{old: getattr(row, new) for new, old in ADDON.items()}
        )


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0025_machine_node_flags_to_kube"),
        ("kube", "0002_machine_node"),
    ]
    # Copied while the cluster still has them.
    run_before = [("clusters", "0026_observed_cluster_state_to_kube")]

    operations = [
        migrations.RemoveField(
            model_name='cluster',
            name='gpu_addon_applied_at',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='gpu_addon_error',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='gpu_addon_hash',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='gpu_addon_resource_version',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='kube_last_complete_observation_at',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='kube_nodes_resource_version',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='kube_observation_complete',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='kube_observation_error',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='kube_observation_started_at',
        ),
        migrations.RemoveField(
            model_name='cluster',
            name='kube_pods_resource_version',
        ),
    ]
    operations = [
        migrations.CreateModel(
            name='ClusterObservation',
            fields=[
                ('cluster', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='kube_observation', serialize=False, to='clusters.cluster')),
                ('complete', models.BooleanField(default=False, help_text='Whether the last observation listed every node and pod. Nothing is judged gone, and no node or machine is flagged, from a partial one.')),
                ('error', models.TextField(blank=True)),
                ('started_at', models.DateTimeField(blank=True, help_text='When the listings of the last observation began.', null=True)),
                ('last_complete_at', models.DateTimeField(blank=True, help_text='When the listings of the last complete one began.', null=True)),
                ('nodes_resource_version', models.CharField(blank=True, help_text='The resourceVersion of the last complete node listing mirrored: a listing with the same one changed nothing.', max_length=64)),
                ('pods_resource_version', models.CharField(blank=True, help_text='The same, for pods.', max_length=64)),
                ('kubeconfig_sha256', models.CharField(blank=True, help_text='The kubeconfig the resourceVersions were listed with: another kubeconfig may reach another cluster, whose listings are compared afresh.', max_length=64)),
            ],
        ),
        migrations.CreateModel(
            name='GpuAddonState',
            fields=[
                ('cluster', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='gpu_addon_state', serialize=False, to='clusters.cluster')),
                ('hash', models.CharField(blank=True, help_text="The hash of the add-on's manifest as last applied; empty: none of ours is known to be in the cluster.", max_length=64)),
                ('applied_at', models.DateTimeField(blank=True, help_text='Since when the add-on, as it is now, is in the cluster.', null=True)),
                ('resource_version', models.CharField(blank=True, help_text="The resourceVersion of our add-on's DaemonSet as last read or written: a replace names it, so that one made from a stale read is refused (409).", max_length=64)),
                ('error', models.TextField(blank=True)),
            ],
        ),

        migrations.RunPython(states_to_kube, states_to_clusters),
    ]
