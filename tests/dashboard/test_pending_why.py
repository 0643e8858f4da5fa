"""Why a GPU pod waits goes on to what would make room: no pool of the cluster makes a
machine with that many GPUs of its type, or the pool's machine waits for capacity that the
cluster's own orphaned vGPUs hold, with the way to release them."""

from __future__ import annotations

import pytest
from django.test import Client

from clusters.models import Machine, MachinePool
from tests.dashboard.conftest import Kube, World
from tests.factories import KubePodFactory, MachineFactory

pytestmark = pytest.mark.django_db

WAITING = (
    "waiting for capacity: 0 free of NVIDIA A100 at nl-fresh-dc01, at most 0 on one card; "
    "a machine needs 1 on one card"
)


def _why(client: Client, world: World, pod: str) -> str:
    page = client.get(f"/pods/pending/?cluster={world.cluster.pk}").content.decode()
    return page.split(f"{pod}</td>")[1].split("</tr>")[0]


def test_a_pod_asking_more_per_machine_than_any_pool_makes_says_so(
    admin_client: Client, world: World, kube: Kube
) -> None:
    KubePodFactory(
        cluster=world.cluster, namespace="ml", name="big", node_name="", phase="Pending",
        gpu_requests=2, gpu_type="nvidia-a100",
    )  # fmt: skip
    KubePodFactory(
        cluster=world.cluster, namespace="ml", name="h100", node_name="", phase="Pending",
        gpu_requests=1, gpu_type="nvidia-h100",
    )  # fmt: skip

    big = _why(admin_client, world, "ml/big")
    h100 = _why(admin_client, world, "ml/h100")

    assert "at most 0 free on one" in big
    assert (
        "no pool of this cluster makes a machine with 2 GPUs of type nvidia-a100: "
        "pool gpu makes 1 per machine"
    ) in big
    assert "no pool of this cluster makes GPUs of type nvidia-h100" in h100


def test_a_machine_held_back_by_the_clusters_own_orphans_says_so_and_links_to_them(
    admin_client: Client, world: World, kube: Kube
) -> None:
    MachinePool.objects.filter(pk=world.pool.pk).update(replicas=3)
    MachineFactory(pool=world.pool, index=2, phase=Machine.Phase.PENDING, failure_message=WAITING)
    KubePodFactory(
        cluster=world.cluster, namespace="ml", name="more", node_name="", phase="Pending",
        gpu_requests=1, gpu_type="nvidia-a100",
    )  # fmt: skip

    why = _why(admin_client, world, "ml/more")

    assert f"machine gpu-2 of pool gpu is {WAITING}" in why
    assert "1 vGPU orphaned by this cluster is billed at nl-fresh-dc01" in why
    link = f'href="/reservations/?cluster={world.cluster.pk}&amp;orphaned=true"'
    assert link in why
    assert (
        world.orphan.name
        in admin_client.get(
            f"/reservations/?cluster={world.cluster.pk}&orphaned=true"
        ).content.decode()
    )
