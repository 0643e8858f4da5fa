"""The Kubernetes mirror, moved here from clusters (clusters/migrations/0024): the models
enter this app's state on the tables they had (`clusters_kubenode` ...), with their rows.
Their content types move too, so that the permissions roles and users hold on them
(`view_kubenode`, `view_kubepod`) are kube's from now on, the same rows."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

MOVED = ["kubenode", "kubepod", "kubewatch"]


def _content_types_move(apps: Any, source: str, target: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        old = content_type.objects.filter(app_label=source, model=model).first()
        if old is None:
            continue  # never made (a fresh database): made for the target after migrate
        # One made for the target meanwhile holds only the default permissions, not those
        # granted: the old one, with its grants, takes its place.
        content_type.objects.filter(app_label=target, model=model).delete()
        old.app_label = target
        old.save(update_fields=["app_label"])


def content_types_to_kube(apps: Any, schema_editor: Any) -> None:
    _content_types_move(apps, "clusters", "kube")


def content_types_to_clusters(apps: Any, schema_editor: Any) -> None:
    _content_types_move(apps, "kube", "clusters")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("clusters", "0024_kubernetes_mirror_to_kube"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='KubeNode',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=253)),
                    ('uid', models.CharField(max_length=64)),
                    ('provider_id', models.CharField(blank=True, max_length=300)),
                    ('labels', models.JSONField(blank=True, default=dict)),
                    ('gpu_capacity', models.PositiveIntegerField(default=0, help_text='nvidia.com/gpu capacity')),
                    ('gpu_allocatable', models.PositiveIntegerField(default=0, help_text='nvidia.com/gpu allocatable, as the device plugin reports it')),
                    ('ready', models.BooleanField(default=False)),
                    ('kubelet_version', models.CharField(blank=True, max_length=64)),
                    ('unowned_since', models.DateTimeField(blank=True, help_text='Since when complete listings show it with no machine of the cluster owning it (control-plane nodes excepted).', null=True)),
                    ('gpus_missing', models.BooleanField(default=False, help_text='Its machine has GPUs, yet it advertises no nvidia.com/gpu GPU_ADVERTISE_TIMEOUT_SECONDS after it joined or the add-on was applied (from a complete node listing).')),
                    ('gpus_missing_reason', models.CharField(blank=True, max_length=300)),
                    ('first_seen_at', models.DateTimeField()),
                    ('updated_at', models.DateTimeField(help_text='When the mirror last wrote the row')),
                    ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='kube_nodes', to='clusters.cluster')),
                    ('machine', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='kube_nodes', to='clusters.machine')),
                ],
                options={
                    'db_table': 'clusters_kubenode',
                    'indexes': [models.Index(fields=['name', 'id'], name='kube_node_by_name'), models.Index(condition=models.Q(('unowned_since__isnull', False)), fields=['cluster'], name='kube_node_unowned'), models.Index(condition=models.Q(('gpus_missing', True)), fields=['cluster'], name='kube_node_gpus_missing')],
                    'constraints': [models.UniqueConstraint(fields=('cluster', 'name'), name='kube_node_unique_per_cluster')],
                },
            ),
            migrations.CreateModel(
                name='KubePod',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('uid', models.CharField(max_length=64)),
                    ('namespace', models.CharField(max_length=63)),
                    ('name', models.CharField(max_length=253)),
                    ('node_name', models.CharField(blank=True, help_text='Empty: not scheduled', max_length=253)),
                    ('phase', models.CharField(choices=[('Pending', 'Pending'), ('Running', 'Running'), ('Succeeded', 'Succeeded'), ('Failed', 'Failed'), ('Unknown', 'Unknown')], max_length=16)),
                    ('gpu_requests', models.PositiveIntegerField(default=0, help_text='nvidia.com/gpu it holds')),
                    ('sriov_network', models.CharField(blank=True, help_text='The external network its capvco.io/sriov-network annotation asks a NIC on', max_length=253)),
                    ('gpu_type', models.CharField(blank=True, help_text='The capvco.io/gpu-type label its nodeSelector asks for (empty: any GPU node)', max_length=63, verbose_name='GPU type')),
                    ('first_seen_at', models.DateTimeField()),
                    ('updated_at', models.DateTimeField(help_text='When the mirror last wrote the row')),
                    ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='kube_pods', to='clusters.cluster')),
                ],
                options={
                    'db_table': 'clusters_kubepod',
                    'indexes': [models.Index(fields=['cluster', 'node_name'], name='clusters_ku_cluster_21331f_idx'), models.Index(condition=models.Q(('gpu_requests__gt', 0), ('phase__in', ['Pending', 'Running'])), fields=['cluster', 'node_name', 'gpu_requests'], name='kube_pod_gpu_requests')],
                    'constraints': [models.UniqueConstraint(fields=('cluster', 'uid'), name='kube_pod_unique_per_cluster')],
                },
            ),
            migrations.CreateModel(
                name='KubeWatch',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('kind', models.CharField(choices=[('nodes', 'Nodes'), ('pods', 'Pods')], max_length=8)),
                    ('watched_at', models.DateTimeField(blank=True, null=True)),
                    ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='kube_watches', to='clusters.cluster')),
                ],
                options={
                    'db_table': 'clusters_kubewatch',
                    'constraints': [models.UniqueConstraint(fields=('cluster', 'kind'), name='kube_watch_unique_per_kind')],
                },
            ),

            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_to_kube, content_types_to_clusters),
    ]
