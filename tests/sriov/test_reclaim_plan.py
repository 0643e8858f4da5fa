"""The dry run is what runs, for what the control plane writes in a workload cluster and
the NICs it reclaims: for seeded random states (GPU nodes with wrong or missing labels,
the GPU add-on missing, drifted, foreign or to be removed, pods gone or finished with
their NICs, detaches left unfinished, leaked NICs), the Kubernetes writes (the fake API
server over HTTPS, its request log) and the whitesky writes (the simulator over HTTP, its
request log) of one pass are exactly the calls the cluster's plan
(`GET /api/v1/clusters/{id}/plan/`) showed just before; and a second pass makes none and
shows no step."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import F
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from capvco_web.models import PlanPass
from cloud.models import Account
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, MachinePool, VmRemovalRequest
from clusters.plan import KINDS, cluster_plan
from clusters.reconcile import cluster_reconcile
from clusters.releases import orphan_sweep
from gpus.resolve import gpu_type_of
from kube.client import kube_client
from kube.gpu_addon import HASH_ANNOTATION, MANAGED_BY_LABEL, addon_manifest
from kube.gpu_nodes import GPU_COUNT_LABEL, GPU_TYPE_LABEL, gpu_label_value
from kube.models import KubePod
from kube.observe import cluster_kube_observe
from kube.plan import NODE_LABELS, kube_plan
from kube.tasks import observe_cluster_kube
from sriov.agent import Clients
from sriov.models import GonePod, LeakedNic, PodNic
from sriov.reclaim import ReclaimResult, cluster_nics_reclaim, nic_plan_apply
from sriov.reclaim_plan import LEAKED_NIC_DETACH, POD_NIC_DETACH, nic_reclaim_plan
from sriov.services import leaked_nic_detach_request
from sriov.tasks import sriov_reclaim_cluster
from sriov.whitesky import sriov_whitesky_client
from tests.factories import (
    GpuProfileFactory,
    VgpuReservationFactory,
    gpu_addon_held,
    kube_observation_of,
)
from tests.integrations.whitesky.world import nic_attached
from tests.kube_sim import node_object
from tests.sriov.support import CLOUDSPACE, NETWORK_ID, World, world_build
from tests.sriov.test_reclaim import _leak, delete_pod
from tests.whitesky_sim import WhiteskySimulator

GRACE = timedelta(minutes=5)
# Clear of the grace period's edge: the dry run and the pass read the clock apart.
DUE, NOT_DUE = GRACE + timedelta(minutes=2), GRACE - timedelta(minutes=2)
KUBE_WRITES = ("patch nodes", "create daemonsets", "update daemonsets", "delete daemonsets")
SEEDS = range(12)
NIC_SEED = 3  # one whose state has pod NICs to detach and leaked NICs
ADDON_STATES = ("off", "off-ours", "missing", "drifted", "right", "foreign")


@pytest.fixture
def world(whitesky_sim: WhiteskySimulator, kube_sim: Any, db: None, settings: Any) -> World:
    settings.SRIOV_RECLAIM_GRACE_SECONDS = GRACE.total_seconds()
    return world_build(whitesky_sim, kube_sim, vms=4)


def one_pass(world: World) -> None:
    """What beat sends for the cluster: observe its Kubernetes (and act on the plan of
    what we write there), and the SR-IOV reclaim."""
    observe_cluster_kube(world.cluster.pk)
    sriov_reclaim_cluster(world.cluster.pk)


def shown(api: APIClient, world: World) -> list[str]:
    """The calls of the dry run's steps, as "<service> <verb> <object>"."""
    answer = api.get(f"/api/v1/clusters/{world.cluster.pk}/plan/")
    assert answer.status_code == 200
    return sorted(
        f"{call['service']} {call['verb']} {call['object']}"
        for step in answer.json()
        if step["action"] not in KINDS  # the machines' steps have their own pass
        for call in step["calls"]
    )


def made(world: World) -> list[str]:
    """The writes the pass made, read from the servers' own request logs."""
    kube = [
        f"kubernetes {c['method']} {c['path']}"
        for c in world.kube.calls("demo")
        if c["method"] != "GET"
    ]
    whitesky = [
        f"whitesky {c['operation']} {c['path'][c['path'].index('cloudspaces/') :]}"
        for c in world.sim.calls()["calls"]
        if c["method"] != "GET"
    ]
    return sorted(kube + whitesky)


def kube_pods(world: World) -> list[dict[str, Any]]:
    found = requests.get(
        f"{world.kube_server}/api/v1/pods",
        headers={"Authorization": f"Bearer {world.kube_token}"},
        timeout=5,
        verify=world.kube_cluster.ca_file,
    )
    found.raise_for_status()
    return list(found.json()["items"])


def clear_calls(world: World) -> None:
    world.kube.clear_calls()
    world.sim.clear_calls()


def seed_state(world: World, seed: int, person: User) -> None:
    """Kubernetes, whitesky and the database as a random history left them; then one pass
    whose writes all fail, so that the mirror holds it all and act has work left."""
    rng = random.Random(seed)
    location = world.location
    cards = [
        GpuProfileFactory(location=location, profile_id="kp-t4", model="Tesla T4 (0000:3b:00.0)"),
        GpuProfileFactory(location=location, profile_id="kp-l4", model="L4 (0000:3c:00.0)"),
    ]
    for index, machine in enumerate(world.machines):
        card = rng.choice([None, *cards])
        if card is not None:
            for _ in range(rng.randint(1, 2)):
                VgpuReservationFactory(machine=machine, location=location, gpu_id=card.profile_id)
        labels = rng.choice(
            [{}, {GPU_TYPE_LABEL: "nvidia-a100", GPU_COUNT_LABEL: "7"}, {GPU_COUNT_LABEL: "1"}]
        )
        if card is not None and rng.random() < 0.3:
            labels = {
                GPU_TYPE_LABEL: gpu_label_value(gpu_type_of(card)),
                GPU_COUNT_LABEL: str(machine.reservations.count()),
            }
        node = node_object(
            world.node(index), provider_id=f"vco://{location.name}/{world.vm(index)}", gpus=1,
            labels=labels,
        )  # fmt: skip
        world.kube.put("demo", node)

    manifest, digest = addon_manifest()
    addon = ADDON_STATES[seed % len(ADDON_STATES)]  # each seen by some seed
    Cluster.objects.filter(pk=world.cluster.pk).update(gpu_addon=not addon.startswith("off"))
    if addon == "off-ours":
        gpu_addon_held(world.cluster, hash="0" * 64)
    if addon in ("off-ours", "drifted", "right", "foreign"):
        manifest["metadata"]["annotations"][HASH_ANNOTATION] = (
            digest if addon == "right" else "0" * 64
        )
        if addon == "foreign":
            del manifest["metadata"]["labels"][MANAGED_BY_LABEL]
        world.kube.put("demo", manifest)

    for n in range(rng.randint(0, 4)):
        name, on = f"pod-{n}", rng.randrange(len(world.machines))
        world.pod(name, node=on)
        nic = world.add(name, node=on)
        assert nic.state == PodNic.State.ATTACHED and nic.mac
        fate = rng.choice(["lives", "gone", "finished", "detach asked"])
        if fate == "gone":
            delete_pod(world, name)
        elif fate == "finished":
            world.pod(name, node=on, phase=rng.choice(["Succeeded", "Failed"]))
        elif fate == "detach asked":
            PodNic.objects.filter(pk=nic.pk).update(state=PodNic.State.DETACHING)
    with sriov_whitesky_client(world.cluster.sriov) as client:
        for _ in range(rng.randint(0, 2)):
            nic_attached(
                client,
                cloudspace_id=CLOUDSPACE,
                vm_id=world.vm(rng.randrange(len(world.machines))),
                external_network_id=NETWORK_ID,
            )
    Account.objects.filter(pk=world.account.pk).update(orphan_auto_release=rng.random() < 0.5)

    for operation in KUBE_WRITES:
        world.kube.fault(operation=operation, status=403)
    world.sim.fault(operation="detachExternalNetworksVirtualMachine", status=409)
    one_pass(world)
    world.kube.clear_faults()
    world.sim.clear_faults()

    # The grace periods, some run out and some not.
    now = timezone.now()
    for gone in GonePod.objects.all():
        GonePod.objects.filter(pk=gone.pk).update(since=now - rng.choice([DUE, NOT_DUE]))
    for leak in LeakedNic.objects.all():
        LeakedNic.objects.filter(pk=leak.pk).update(leaked_since=now - rng.choice([DUE, NOT_DUE]))
        if rng.random() < 0.3:
            leaked_nic_detach_request(nic=leak, actor=person, reason="not ours")


@pytest.mark.parametrize("seed", SEEDS)
def test_one_pass_makes_exactly_the_calls_the_dry_run_showed(
    world: World, django_user_model: Any, seed: int
) -> None:
    person = django_user_model.objects.create_superuser("root", password="x")
    api = APIClient()
    api.force_authenticate(person)
    seed_state(world, seed, person)
    # What the plan judges from: the last pod observation was whole (every page listed)
    # and began after every NIC was asked for, so a pod it lacks was there and is gone;
    # each leak comes from a VM's NIC listing (one call, no pages) made while no attach
    # on the VM was in flight.
    observation = kube_observation_of(world.cluster)
    assert observation.complete
    listed_at = observation.last_complete_at
    assert listed_at is not None
    assert all(nic.requested_at < listed_at for nic in PodNic.objects.all())
    assert not PodNic.objects.filter(state=PodNic.State.ATTACHING).exists()
    assert set(KubePod.objects.filter(cluster=world.cluster).values_list("uid", flat=True)) == {
        pod["metadata"]["uid"] for pod in kube_pods(world)
    }

    planned = shown(api, world)
    page = Client()
    page.force_login(person)
    html = page.get(reverse("dashboard:cluster", args=[world.cluster.pk])).content.decode()
    assert all(call in html for call in planned)  # the cluster page lists them too
    clear_calls(world)
    one_pass(world)

    assert made(world) == planned

    # Nothing changed: the plan shows no step, and the next pass makes no write.
    assert api.get(f"/api/v1/clusters/{world.cluster.pk}/plan/").json() == []
    clear_calls(world)
    with CaptureQueriesContext(connection) as queries:
        one_pass(world)
    assert made(world) == []
    assert api.get(f"/api/v1/clusters/{world.cluster.pk}/plan/").json() == []
    writes = {
        q["sql"].split(" SET ")[0]
        for q in queries.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))
    }
    assert writes <= {'UPDATE "kube_clusterobservation"'}  # the observation's stamp


def test_a_detach_whose_rows_changed_since_the_plan_is_dropped_and_planned_again(
    world: World,
) -> None:
    world.pod("web")
    world.pod("busy")
    gone = world.add("web")
    busy = world.add("busy")
    delete_pod(world, "web")
    mac = _leak(world)
    cluster = Cluster.objects.get(pk=world.cluster.pk)
    with kube_client(cluster) as client:
        assert cluster_kube_observe(client=client, cluster=cluster).complete
    now = timezone.now()
    assert cluster_nics_reclaim(cluster=cluster, now=now).leaked  # observed, not due yet
    later = now + DUE
    steps = nic_reclaim_plan(Cluster.objects.get(pk=cluster.pk), now=later, grace=GRACE)
    assert sorted(step.kind for step in steps) == ["leaked_nic_detach", "pod_nic_detach"]

    # Since the plan: the DEL of `web` came after all, and an attach began on the VM.
    PodNic.objects.filter(pk=gone.pk).update(state=PodNic.State.DETACHING)
    PodNic.objects.filter(pk=busy.pk).update(state=PodNic.State.ATTACHING)
    world.sim.clear_calls()
    result = ReclaimResult(cluster=cluster.name, pods_complete=True)
    with sriov_whitesky_client(world.cluster.sriov) as client:
        nic_plan_apply(
            cluster=cluster, steps=steps, clients=Clients(), client=client, result=result
        )

    assert len(result.dropped) == 2 and result.released == result.leaks_detached == []
    assert world.sim.calls()["writes"] == 0
    PodNic.objects.filter(pk=busy.pk).update(state=PodNic.State.ATTACHED)
    done = cluster_nics_reclaim(cluster=cluster, now=later, grace=GRACE)
    assert (done.released, done.leaks_detached) == ([str(gone)], [mac])


@pytest.mark.parametrize("seed", SEEDS)
def test_the_dry_run_of_every_plan_goes_through_the_one_dispatcher_and_calls_nothing(
    world: World, django_user_model: Any, seed: int
) -> None:
    """Machines, Kubernetes objects, NICs (the cluster's pass) and a location's sweep:
    each step is dispatched as planned, its calls listed, and no server sees a call."""
    person = django_user_model.objects.create_superuser("root", password="x")
    seed_state(world, seed, person)
    MachinePool.objects.filter(cluster=world.cluster).update(replicas=F("replicas") + 1)
    VmRemovalRequest.objects.create(
        location=world.location, vm_id=9999, name="by-hand", cloudspace_id=CLOUDSPACE,
        requested_at=timezone.now(), reason="a person's", requested_by=person,
    )  # fmt: skip
    cluster = Cluster.objects.get(pk=world.cluster.pk)
    plan = cluster_plan(cluster, planners=(kube_plan,))
    clear_calls(world)
    writes = PlanPass.objects.count()

    with whitesky_client(world.account) as client:
        record = cluster_reconcile(
            client=client, cluster=cluster, dry_run=True, planners=(kube_plan,)
        ).record
        sweep = orphan_sweep(client=client, location=world.location, dry_run=True).record

    assert record is not None and sweep is not None
    kinds = {step.kind for step in record.steps}
    assert "create" in kinds and NODE_LABELS in kinds  # machines and Kubernetes objects
    assert [s.describe() for s in record.steps] == [s.describe() for s in plan.shown]
    assert record.calls == [call for step in plan.shown for call in step.calls()]
    nics = nic_reclaim_plan(cluster, now=timezone.now(), grace=GRACE)
    assert {s.describe() for s in nics} <= {s.describe() for s in record.steps}
    assert [s.kind for s in sweep.steps] == ["remove_vm"]  # the location's plan
    assert {o.outcome for o in [*record.outcomes, *sweep.outcomes]} == {"planned"}
    # Nothing called, nothing written: the servers' logs and the passes are as they were.
    assert world.kube.calls("demo") == [] and world.sim.calls()["calls"] == []
    assert PlanPass.objects.count() == writes


def test_some_seed_plans_every_kind_of_nic_step(world: World, django_user_model: Any) -> None:
    """The dry run above lists NIC steps of both kinds (not only empty plans)."""
    person = django_user_model.objects.create_superuser("root", password="x")
    seed_state(world, NIC_SEED, person)
    # Its leaks due, in an account that releases orphans by itself.
    LeakedNic.objects.update(leaked_since=timezone.now() - DUE)
    Account.objects.filter(pk=world.account.pk).update(orphan_auto_release=True)
    cluster = Cluster.objects.get(pk=world.cluster.pk)
    with whitesky_client(world.account) as client:
        record = cluster_reconcile(
            client=client, cluster=cluster, dry_run=True, planners=(kube_plan,)
        ).record
    assert record is not None
    kinds = {step.kind for step in record.steps}
    assert {POD_NIC_DETACH, LEAKED_NIC_DETACH} <= kinds, kinds
