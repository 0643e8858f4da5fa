"""The dry run is what runs: for seeded random states, the whitesky writes a pass makes are
the calls the plans showed just before it (recorded at the simulator, over real HTTP)."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs

import pytest
import requests
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone

from capvco_web.audit import SystemActor
from capvco_web.integrations.whitesky import operations as ops
from cloud.models import Location
from cloud.whitesky import whitesky_client
from clusters.models import Cluster, Machine, MachinePool
from clusters.plan import Call, MachineCreate, MachineProvision, cluster_plan
from clusters.reconcile import cluster_reconcile
from clusters.releases import location_plan
from clusters.services import cluster_delete, machine_force_delete, pool_update
from clusters.tasks import orphan_sweep_location, reconcile_machine
from tests.gpus.conftest import BE, NL, Plane
from tests.gpus.support import auto_release_set

OUTSIDER = "outsider"  # someone else using the customer's account: not our calls
VM_PATH = re.compile(r"/vms/(?P<vm>\d+)(?:/(?P<what>gpus|vgpus)/(?P<id>[^/]+))?")
VGPU_PATH = re.compile(r"/vgpus/(?P<id>[^/?]+)$")
WRITES = {
    op.operation_id
    for op in (ops.CREATE_VM, ops.START_VM, ops.STOP_VM, ops.DELETE_VM, ops.RELEASE_VGPU)
}
WRITES |= {ops.RESERVE_AND_ATTACH_VGPU.operation_id, ops.ATTACH_VGPU.operation_id}


def writes_made(plane: Plane, vms_before: set[int]) -> tuple[Counter[Call], bool]:
    """Our writes since the call log was cleared, as calls (VMs made in the pass named by
    their name, as the plan names them), and whether whitesky refused any of them."""
    names = {vm["vm_id"]: vm["name"] for vm in plane.sim.state()["vms"]}

    def vm_ref(vm_id: str) -> str:
        return names[int(vm_id)] if int(vm_id) not in vms_before else vm_id

    made: Counter[Call] = Counter()
    refused = False
    for call in plane.sim.calls()["calls"]:
        if call["method"] == "GET" or call["subject"] == OUTSIDER:
            continue
        refused = refused or call["status"] is None or call["status"] >= 300
        verb = call["operation"]  # the operationId, as the steps name their calls
        assert verb in WRITES, f"unplanned {verb} {call['path']}"
        vm = VM_PATH.search(call["path"])
        if verb == ops.CREATE_VM.operation_id:
            target = parse_qs(call["query"])["name"][0]
        elif verb == ops.RESERVE_AND_ATTACH_VGPU.operation_id and vm:
            target = f"{vm_ref(vm['vm'])}/{vm['id']}"
        elif verb == ops.ATTACH_VGPU.operation_id and vm:
            target = vm["id"]
        elif verb == ops.RELEASE_VGPU.operation_id:
            found = VGPU_PATH.search(call["path"].split("?")[0])
            target = found["id"] if found else call["path"]
        elif vm:
            target = vm_ref(vm["vm"])
        else:
            target = call["path"]
        made[Call(verb, target)] += 1
    return made, refused


def assert_ran_as_shown(shown: list[Call], made: Counter[Call], refused: bool, what: str) -> None:
    sure = Counter(c for c in shown if not c.maybe)
    maybe = Counter(c for c in shown if c.maybe)
    unshown = made - sure - maybe
    assert not unshown, f"{what}: calls the dry run did not show: {sorted(unshown)}"
    if not refused:  # a refusal ends its step: what it would have done next is not made
        assert sure - made == Counter(), f"{what}: shown, not made: {sorted(sure - made)}"


class Outsider:
    """Someone at the customer doing things by hand, with a token of their own."""

    def __init__(self, plane: Plane) -> None:
        self.base = f"{plane.sim.api_url}/customers/{plane.sim.customer_id}"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {plane.sim.token(OUTSIDER)}"
        self.n = 0

    def card_fill(self, location: str, card: str) -> None:
        for _ in range(20):
            self.n += 1
            url = f"{self.base}/locations/{location}/gpus/{card}"
            if self.session.post(url, json={"vgpu_name": f"by-hand-{self.n}"}).status_code >= 300:
                return

    def vm_delete(self, cloudspace: str, vm_id: int, *, permanently: bool) -> None:
        url = f"{self.base}/cloudspaces/{cloudspace}/vms/{vm_id}"
        self.session.post(f"{url}/stop", params={"force": "true"})
        self.session.delete(url, params={"permanently": str(permanently).lower()})


def one_pass(plane: Plane, rng: random.Random, outsider: Outsider) -> set[str]:
    """Every cluster, then every location, each as its task runs it, compared with the
    dry run taken just before it. Answers the kinds of the machines' steps shown."""
    kinds: set[str] = set()
    for cluster in Cluster.objects.order_by("name"):
        shown_steps = cluster_plan(cluster).steps
        kinds |= {step.kind for step in shown_steps}
        shown = [call for step in shown_steps for call in step.calls()]
        reserves = [
            s
            for s in shown_steps
            if isinstance(s, MachineCreate | MachineProvision)
            and s.reserve
            and s.card_id
            and not s.blocked
        ]
        if reserves and rng.random() < 0.3:
            # The card fills up between the plan and the act: the reserve is refused, and
            # no other card is tried in this pass.
            pool = MachinePool.objects.select_related("site__location").get(pk=reserves[0].pool_id)
            outsider.card_fill(pool.site.location.name, reserves[0].card_id)
        vms_before = {vm["vm_id"] for vm in plane.sim.state()["vms"]}
        plane.sim.clear_calls()

        def fan_out(step: Any) -> None:
            # As the worker pool gets it: JSON.
            reconcile_machine(json.loads(json.dumps(step.as_data())))

        with whitesky_client(plane.account) as client:
            cluster_reconcile(client=client, cluster=cluster, fan_out=fan_out)
        made, refused = writes_made(plane, vms_before)
        assert_ran_as_shown(shown, made, refused, f"cluster {cluster.name}")
    for location in Location.objects.filter(account=plane.account).order_by("name"):
        shown = [call for step in location_plan(location).steps for call in step.calls()]
        vms_before = {vm["vm_id"] for vm in plane.sim.state()["vms"]}
        plane.sim.clear_calls()
        orphan_sweep_location(location.pk)
        made, refused = writes_made(plane, vms_before)
        assert_ran_as_shown(shown, made, refused, f"location {location.name}")
    return kinds


def mutate(
    plane: Plane, rng: random.Random, outsider: Outsider, admin: User, *, edits: bool = False
) -> None:
    """One or two of the things that happen between passes; with `edits`, pool edits too
    (a new GPU type or size: the machines are replaced one at a time)."""
    changes = ["scale", "scale", "refuse", "force", "vanish", "retry", "delete"]
    for _ in range(rng.randint(1, 2)):
        machines = list(Machine.objects.select_related("pool__site").order_by("pk"))
        change = rng.choice(changes + ["edit", "edit"] * edits)
        if change == "edit":
            pools = MachinePool.objects.filter(cluster__state="active").order_by("pk")
            pool = rng.choice(list(pools.select_related("cluster", "site__location")))
            pool.vcpus = rng.choice([4, 8])
            if pool.gpu_count and rng.random() < 0.5:
                pool.gpu_type = rng.choice(["NVIDIA A100", "NVIDIA L40S"])
            pool_update(pool=pool, actor=admin, reason="resized")
        elif change == "scale":
            pool = rng.choice(list(MachinePool.objects.filter(cluster__state="active")))
            pool.replicas = rng.randint(0, 3)
            pool.save()
        elif change == "refuse":
            op = rng.choice(["createVirtualMachine", "startVirtualMachine"])
            plane.sim.fault(operation=op, status=400, times=1)
        elif change == "force" and machines:
            machine = rng.choice(machines)
            machine_force_delete(machine=machine, actor=SystemActor.RECONCILER, reason="stuck")
        elif change == "vanish" and (running := [m for m in machines if m.vm_id]):
            machine = rng.choice(running)
            assert machine.vm_id is not None
            site = machine.pool.site
            outsider.vm_delete(site.cloudspace_id, machine.vm_id, permanently=rng.random() < 0.5)
        elif change == "retry":  # the backoff of failed machines (and teardowns) is over
            past = timezone.now() - timedelta(seconds=1)
            Machine.objects.exclude(next_try_at=None).update(next_try_at=past)
        elif change == "delete":
            other = Cluster.objects.filter(name="other", state="active").first()
            if other is not None:
                cluster_delete(cluster=other, actor=admin, reason="done", confirm=other.name)


@pytest.mark.parametrize(
    ("seed", "edits"), [*((seed, False) for seed in range(1, 9)), (10, True), (11, True)]
)
@override_settings(MACHINE_RETRY_BASE_SECONDS=3600)
def test_a_pass_makes_exactly_the_whitesky_writes_its_dry_run_showed(
    plane: Plane, admin_user: User, seed: int, edits: bool
) -> None:
    rng = random.Random(seed)
    outsider = Outsider(plane)
    auto_release_set(plane.account, on=True, confirmations=1, grace_seconds=0)
    demo = plane.cluster("demo")
    other = plane.cluster("other", sites=(NL,))
    plane.pool(demo, "a100", gpu_type="NVIDIA A100", gpu_count=rng.randint(1, 2), replicas=2)
    plane.pool(demo, "cpu", location=BE, replicas=rng.randint(0, 2))
    plane.pool(other, "l40s", gpu_type="NVIDIA L40S", gpu_count=1, replicas=rng.randint(1, 2))

    kinds: set[str] = set()
    for _ in range(8):
        plane.observe()
        kinds |= one_pass(plane, rng, outsider)
        mutate(plane, rng, outsider, admin_user, edits=edits)
    plane.sim.clear_faults()
    for _ in range(3):  # and it still converges
        plane.observe()
        kinds |= one_pass(plane, rng, outsider)
    assert edits <= ("replace" in kinds)  # the seeds with edits replace machines


def test_a_card_refused_for_room_ends_the_step_and_the_next_plan_takes_another(
    plane: Plane,
) -> None:
    cluster = plane.cluster("demo", sites=(NL,))
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.observe()
    (step,) = cluster_plan(cluster).steps
    Outsider(plane).card_fill(NL, step.card_id)  # taken by hand after the listing

    plane.reconcile(cluster)

    machine = Machine.objects.get()
    assert machine.gpu_card_refused == step.card_id
    assert [v["gpu_id"] for v in plane.sim_vgpus()] == []  # no other card tried meanwhile
    (again,) = cluster_plan(cluster).steps  # no new listing yet: the card counts as full
    assert again.card_id not in ("", step.card_id) and not again.create_vm

    plane.converge(cluster)

    assert [v["gpu_id"] for v in plane.sim_vgpus()] == [again.card_id]
    machine.refresh_from_db()
    assert machine.phase == Machine.Phase.RUNNING and machine.gpu_card_refused == ""
