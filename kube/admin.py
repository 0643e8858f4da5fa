"""The Kubernetes mirror in the admin: read only, changed only by observing."""

from __future__ import annotations

from django.contrib import admin

from cloud.admin import MirroredAdmin
from kube.models import KubeNode, KubePod


@admin.register(KubeNode)
class KubeNodeAdmin(MirroredAdmin[KubeNode]):
    list_display = [
        "name", "cluster", "ready", "gpu_type_label", "gpu_allocatable", "gpu_capacity",
        "machine", "unowned_since", "gpus_missing", "kubelet_version",
    ]  # fmt: skip
    list_filter = ["cluster", "ready", "gpus_missing"]
    list_select_related = ["cluster", "machine"]
    search_fields = ["name", "provider_id"]


@admin.register(KubePod)
class KubePodAdmin(MirroredAdmin[KubePod]):
    list_display = ["name", "namespace", "cluster", "node_name", "phase", "gpu_requests"]
    list_filter = ["cluster", "phase"]
    list_select_related = ["cluster"]
    search_fields = ["name", "namespace", "node_name", "uid"]
