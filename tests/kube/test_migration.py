"""A database from before the kube app: its Kubernetes mirror, what roles were granted on
it, the machines' node flags and the clusters' observed state come out as kube's, the same
rows and values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import factory
import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from kube.models import ClusterObservation, GpuAddonState, KubeNode, KubePod, MachineNode
from kube.observe import kubeconfig_sha256
from tests.factories import MachineFactory, MachinePoolFactory, UserFactory

CLUSTERS_BEFORE = ("clusters", "0023_machine_capacity_wait_and_stuck")
BEFORE: list[tuple[str, str | None]] = [CLUSTERS_BEFORE, ("kube", None)]


def _migrate_back() -> Any:
    """The database as it was before the kube app; the models of then."""
    MigrationExecutor(connection).migrate(BEFORE)
    return MigrationExecutor(connection).loader.project_state([CLUSTERS_BEFORE]).apps


def _migrate_forward() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_mirror_and_the_permissions_granted_on_it_move_to_kube() -> None:
    pool = MachinePoolFactory(site__cluster__name="prod")
    joined, flagged, _quiet = MachineFactory.create_batch(3, pool=pool, vm_id=factory.Sequence(int))
    cluster = pool.cluster
    old = _migrate_back()
    machines = old.get_model("clusters", "Machine").objects
    machines.filter(pk=joined.pk).update(node_joined_at="2026-01-02T03:04Z")
    machines.filter(pk=flagged.pk).update(node_missing=True, node_missing_reason="Never joined")
    listed_at = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
    old.get_model("clusters", "Cluster").objects.filter(pk=cluster.pk).update(
        kubeconfig="apiVersion: v1\n",
        kube_observation_complete=True,
        kube_observation_started_at=listed_at,
        kube_last_complete_observation_at=listed_at,
        kube_nodes_resource_version="41",
        gpu_addon=True,
        gpu_addon_hash="f" * 64,
        gpu_addon_applied_at=listed_at,
    )
    node = old.get_model("clusters", "KubeNode").objects.create(
        cluster_id=cluster.pk, name="node-0", uid="u-0", first_seen_at="2026-01-01T00:00Z",
        updated_at="2026-01-01T00:00Z",
    )  # fmt: skip
    old.get_model("clusters", "KubePod").objects.create(
        cluster_id=cluster.pk, uid="p-0", namespace="ml", name="train", node_name="node-0",
        phase="Running", gpu_requests=1, first_seen_at="2026-01-01T00:00Z",
        updated_at="2026-01-01T00:00Z",
    )  # fmt: skip
    # A role granted the view of nodes while they were clusters'.
    granted = Permission.objects.get(content_type__app_label="clusters", codename="view_kubenode")
    role = Group.objects.create(name="node-readers")
    role.permissions.add(granted)
    user = UserFactory()
    user.groups.add(role)

    _migrate_forward()

    assert KubeNode.objects.get().pk == node.pk
    assert list(KubePod.objects.values_list("cluster__name", "namespace", "name")) == [
        ("prod", "ml", "train")
    ]
    flags = MachineNode.objects.values_list("machine", "vm_id", "joined_at", "missing_reason")
    assert sorted(flags) == [
        (joined.pk, joined.vm_id, datetime(2026, 1, 2, 3, 4, tzinfo=UTC), ""),
        (flagged.pk, flagged.vm_id, None, "Never joined"),
    ]  # the quiet machine needs no row: never seen, not flagged
    observation = ClusterObservation.objects.get(cluster=cluster)
    assert (observation.complete, observation.started_at, observation.last_complete_at) == (
        True, listed_at, listed_at,
    )  # fmt: skip
    # Its resourceVersions stay of use: they were listed with the kubeconfig it holds.
    assert observation.nodes_resource_version == "41"
    assert observation.kubeconfig_sha256 == kubeconfig_sha256("apiVersion: v1\n")
    addon = GpuAddonState.objects.get(cluster=cluster)
    assert (addon.hash, addon.applied_at, addon.error) == ("f" * 64, listed_at, "")
    assert GpuAddonState.objects.count() == ClusterObservation.objects.count() == 1
    assert Permission.objects.get(pk=granted.pk).content_type.app_label == "kube"
    assert set(role.permissions.values_list("content_type__app_label", "codename")) == {
        ("kube", "view_kubenode")
    }
    assert UserFactory._meta.model.objects.get(pk=user.pk).has_perm("kube.view_kubenode")
    assert not ContentType.objects.filter(app_label="clusters", model__startswith="kube").exists()


@pytest.mark.django_db(transaction=True)
def test_the_move_is_undone_by_migrating_back() -> None:
    _migrate_back()

    moved_back = ContentType.objects.filter(app_label="clusters", model="kubenode")
    assert moved_back.exists()
    assert not ContentType.objects.filter(app_label="kube", model__startswith="kube").exists()
    _migrate_forward()
    assert ContentType.objects.filter(app_label="kube", model="kubenode").exists()


@pytest.mark.django_db(transaction=True)
def test_pods_mirrored_before_their_labels_are_compared_afresh_by_the_next_listing() -> None:
    pool = MachinePoolFactory(site__cluster__name="prod")
    before = [("kube", "0007_gpu_use")]
    MigrationExecutor(connection).migrate(before)
    old = MigrationExecutor(connection).loader.project_state(before).apps
    old.get_model("kube", "ClusterObservation").objects.create(
        cluster_id=pool.cluster_id, nodes_resource_version="41", pods_resource_version="42"
    )
    old.get_model("kube", "KubePod").objects.create(
        cluster_id=pool.cluster_id, uid="p-0", namespace="ml", name="train", phase="Running",
        first_seen_at="2026-01-01T00:00Z", updated_at="2026-01-01T00:00Z",
    )  # fmt: skip

    _migrate_forward()

    assert KubePod.objects.get().labels == {}
    observation = ClusterObservation.objects.get(cluster=pool.cluster)
    # The pods' listing is compared (and their labels written) though it did not change.
    assert (observation.nodes_resource_version, observation.pods_resource_version) == ("41", "")
