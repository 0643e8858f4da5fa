"""Machines made before their spec was recorded take their pool's spec on upgrade, so the
upgrade replaces none of them (migrated forward on PostgreSQL)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from clusters.models import Cluster, Machine, MachinePool
from clusters.plan import cluster_plan
from tests.factories import JWT

BEFORE = [("clusters", "0018_pool_gpu_fit_refusal")]


@pytest.mark.django_db(transaction=True)
def test_existing_machines_take_their_pools_spec_and_nothing_is_replaced() -> None:
    # Back to before machine specs: Django takes back whatever depends on them too, in any
    # app; the models are those of what is left applied.
    MigrationExecutor(connection).migrate(BEFORE)
    loader = MigrationExecutor(connection).loader
    get = loader.project_state(sorted(loader.applied_migrations)).apps.get_model
    account = get("cloud", "Account").objects.create(
        name="old", api_url="https://vco.example/api/1", iam_url="https://iam.example",
        customer_id="c-1", credential=JWT,
    )  # fmt: skip
    location = get("cloud", "Location").objects.create(account=account, name="nl-1")
    cluster = get("clusters", "Cluster").objects.create(name="c", account=account)
    site = get("clusters", "ClusterSite").objects.create(
        cluster=cluster, location=location, cloudspace_id="cs-1", image_id=7
    )
    pool = get("clusters", "MachinePool").objects.create(
        cluster=cluster, site=site, name="a100", replicas=1, gpu_type="NVIDIA A100",
        gpu_count=2, vcpus=8, memory_mib=16384, disk_gib=80, next_index=1,
    )  # fmt: skip
    get("clusters", "Machine").objects.create(
        pool=pool, name="a100-0", index=0, vm_id=42, phase="running"
    )

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    machine = Machine.objects.get(name="a100-0")
    assert machine.spec == MachinePool.objects.get(pk=pool.pk).machine_spec()
    assert machine.spec == {
        "gpu_type": "NVIDIA A100",
        "gpu_profile_id": "",
        "gpu_count": 2,
        "vcpus": 8,
        "memory_mib": 16384,
        "disk_gib": 80,
    }
    assert machine.spec_changes() == []
    assert [s.kind for s in cluster_plan(Cluster.objects.get(pk=cluster.pk)).steps] == []
