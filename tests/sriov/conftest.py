from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from capvco_web.audit import SystemActor
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from kube.client import shared_clients
from sriov.services import sriov_config_set
from sriov.tokens import agent_token_rotate, agent_tokens_forget, node_token_enroll
from tests.kube_sim import KubeSimulator, node_object, pod_object
from tests.sriov.support import CLOUDSPACE, NETWORK, World, queue_worker, world_build
from tests.whitesky_sim import WhiteskySimulator


@pytest.fixture(autouse=True)
def _nothing_kept_from_before() -> None:
    """Each test's tokens and Kubernetes clients are its own: none kept by a test before."""
    agent_tokens_forget()
    shared_clients.clear()


@pytest.fixture
def world(whitesky_sim: WhiteskySimulator, kube_sim: KubeSimulator, db: None) -> World:
    """The SR-IOV world (tests/sriov/support.py), in the test's transaction; committed when
    the test also asks for `transactional_db` or `live_server` (pytest-django's `db` then
    commits), as `world_tx` and `live_world` do."""
    return world_build(whitesky_sim, kube_sim)


@pytest.fixture
def world_tx(world: World, transactional_db: None) -> World:
    """The world, committed: threads with connections of their own see it."""
    return world


@pytest.fixture
def live_world(world: World, live_server: Any) -> Iterator[World]:
    """The world, committed, the live server that serves the agent API on it, and a
    worker that attaches the NICs its ADDs queue."""
    with queue_worker():
        yield world


@pytest.fixture
def other(world: World) -> tuple[Cluster, str]:
    """Cluster `other` of the same account, SR-IOV on, with a machine whose node `node-0`
    holds a node token (returned) and a pod of its own."""
    cluster = Cluster.objects.create(name="other", account=world.account)
    site = ClusterSite.objects.create(
        cluster=cluster, location=world.location, cloudspace_id=CLOUDSPACE, image_id=11
    )
    pool = MachinePool.objects.create(cluster=cluster, site=site, name="w", replicas=1)
    vm_id = world.sim.seed(CLOUDSPACE, vms=1, prefix="capvco-other-w")["vm_ids"][0]
    Machine.objects.create(pool=pool, name="w-0", index=0, vm_id=vm_id, phase="running")
    kube = world.kube.cluster("other")
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=kube.kubeconfig_yaml)
    cluster.refresh_from_db()
    sriov_config_set(
        cluster=cluster,
        changes={
            "enabled": True,
            "external_network": NETWORK,
            "credential": world.sim.token(subject="other-operator"),
        },
        actor=SystemActor.RECONCILER,
    )
    world.kube.put(
        "other",
        node_object("node-0", provider_id=f"vco://{world.location.name}/{vm_id}"),
        pod_object("intruder", node="node-0"),
    )
    enrollment, _ = agent_token_rotate(cluster=cluster, actor=SystemActor.RECONCILER)
    _, raw = node_token_enroll(enrollment=enrollment, node_name="node-0")
    return cluster, raw
