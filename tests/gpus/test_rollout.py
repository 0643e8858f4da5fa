"""A pool edit (GPU type or count, size) replaces its machines one at a time: each machine
made with an older spec is torn down once every other machine of the pool runs, and the
pool makes a new one with the new spec (at most one unavailable, none beyond the
replicas)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from capvco_web.models import AuditEvent
from clusters.models import Machine, MachinePool
from clusters.plan import cluster_plan
from clusters.services import pool_update
from gpus.models import GpuProfile, VgpuReservation
from tests.gpus.conftest import NL, Plane
from tests.gpus.test_plan_dry_run import Outsider


def _edit(pool: MachinePool, actor: User, reason: str = "", **fields: object) -> None:
    pool = MachinePool.objects.select_related("cluster", "site__location").get(pk=pool.pk)
    for name, value in fields.items():
        setattr(pool, name, value)
    pool_update(pool=pool, actor=actor, reason=reason)


def test_a_changed_spec_plans_one_replacement_only_while_every_other_machine_runs(
    plane: Plane, admin_user: User
) -> None:
    cluster = plane.cluster("demo", sites=(NL,))
    pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, replicas=2)
    plane.converge(cluster)
    assert cluster_plan(cluster).steps == []
    first, second = Machine.objects.order_by("index")
    held = VgpuReservation.objects.get(machine=first)

    _edit(pool, admin_user, gpu_type="NVIDIA L40S")

    (step,) = cluster_plan(cluster).steps
    assert (step.kind, step.target, step.machine_id) == ("replace", "a100-0", first.pk)
    assert step.reason == "pool spec changed: gpu_type NVIDIA A100 -> NVIDIA L40S"
    assert step.seen == first.updated_at
    assert [str(call) for call in step.calls()] == [
        f"whitesky stopVirtualMachine {first.vm_id}",
        f"whitesky deleteVirtualMachine {first.vm_id}",
        f"whitesky deleteVGPU {held.vgpu_id}",
    ]

    # The other machine starting (as a replacement does): nothing is replaced meanwhile.
    Machine.objects.filter(pk=second.pk).update(
        phase=Machine.Phase.STARTING, spec=MachinePool.objects.get(pk=pool.pk).machine_spec()
    )
    assert [s.kind for s in cluster_plan(cluster).steps] == ["provision"]

    # A machine missing from the pool, or one being torn down: no replacement either.
    Machine.objects.filter(pk=second.pk).update(phase=Machine.Phase.RUNNING)
    MachinePool.objects.filter(pk=pool.pk).update(replicas=3)
    assert [s.kind for s in cluster_plan(cluster).steps] == ["create"]
    MachinePool.objects.filter(pk=pool.pk).update(replicas=2)
    Machine.objects.filter(pk=second.pk).update(delete_requested=True)
    assert {s.kind for s in cluster_plan(cluster).steps} == {"teardown", "create"}


def test_an_outdated_machine_that_is_not_running_goes_first(plane: Plane, admin_user: User) -> None:
    cluster = plane.cluster("demo", sites=(NL,))
    pool = plane.pool(cluster, "cpu", replicas=2)
    plane.converge(cluster)
    Machine.objects.filter(name="cpu-1").update(phase=Machine.Phase.FAILED)

    _edit(pool, admin_user, vcpus=8)

    (step,) = cluster_plan(cluster).steps
    assert (step.kind, step.target) == ("replace", "cpu-1")
    assert step.reason == "pool spec changed: vcpus 4 -> 8"


def test_a_gpu_type_and_size_edit_replaces_both_machines_one_after_the_other(
    plane: Plane, admin_user: User
) -> None:
    cluster = plane.cluster("demo", sites=(NL,))
    pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, replicas=2)
    plane.converge(cluster)
    old_vgpus = {v["vgpu_id"] for v in plane.sim_vgpus()}
    old_vms = {vm["vm_id"] for vm in plane.sim_vms()}
    assert len(old_vgpus) == len(old_vms) == 2

    _edit(pool, admin_user, "A100s go back", gpu_type="NVIDIA L40S", vcpus=8, memory_mib=16384)
    results = plane.converge(cluster, passes=10)

    # One machine at a time: each replacement alone in its pass, the new machine made
    # (and running) before the next one goes.
    replaced = [[s.target for s in r.plan if s.kind == "replace"] for r in results]
    assert [names for names in replaced if names] == [["a100-0"], ["a100-1"]]
    for result in results:
        machines = {s.target for s in result.plan}
        assert len(machines) <= 1, f"two machines of the pool changed at once: {machines}"
    assert not results[-1].plan
    machines = list(Machine.objects.order_by("index"))
    assert [(m.name, m.phase) for m in machines] == [("a100-2", "running"), ("a100-3", "running")]
    assert all(m.spec == MachinePool.objects.get(pk=pool.pk).machine_spec() for m in machines)

    vms = plane.sim_vms()
    assert sorted(vm["name"] for vm in vms) == ["capvco-demo-a100-2", "capvco-demo-a100-3"]
    assert {(vm["vcpus"], vm["memory"]) for vm in vms} == {(8, 16384)}
    l40s = set(
        GpuProfile.objects.filter(location__name=NL, model__contains="L40S").values_list(
            "profile_id", flat=True
        )
    )
    vgpus = plane.sim_vgpus()
    assert len(vgpus) == 2 and {v["gpu_id"] for v in vgpus} <= l40s
    assert not old_vgpus & {v["vgpu_id"] for v in vgpus}
    gone = VgpuReservation.objects.filter(vgpu_id__in=old_vgpus)
    assert set(gone.values_list("state", flat=True)) == {"released"}
    assert plane.unassigned_billed() == {}

    requested = AuditEvent.objects.filter(action="machine.delete_requested").order_by("pk")
    assert [(e.object_repr, e.reason) for e in requested] == [
        (
            f"demo/{name}",
            "pool spec changed: gpu_type NVIDIA A100 -> NVIDIA L40S, vcpus 4 -> 8, "
            "memory_mib 8192 -> 16384 (pool edited: A100s go back)",
        )
        for name in ("a100-0", "a100-1")
    ]


def test_a_vm_made_again_with_the_vgpus_of_the_old_one_stays_outdated_for_its_gpus(
    plane: Plane, admin_user: User
) -> None:
    cluster = plane.cluster("demo", sites=(NL,))
    pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, replicas=2)
    plane.converge(cluster)
    _edit(pool, admin_user, gpu_type="NVIDIA L40S", vcpus=8)
    # The other machine waits for its next try, so no replacement may start, and the VM
    # of a100-0 vanishes: it is made again (replace_vm) and keeps its A100 vGPU.
    later = timezone.now() + timedelta(hours=1)
    Machine.objects.filter(name="a100-1").update(phase=Machine.Phase.FAILED, next_try_at=later)
    vanished = Machine.objects.get(name="a100-0")
    assert vanished.vm_id is not None
    outsider = Outsider(plane)
    url = f"{outsider.base}/cloudspaces/cs-demo-nl/vms/{vanished.vm_id}"
    outsider.session.post(f"{url}/stop", params={"force": "true"})
    deleted = outsider.session.delete(url, params={"permanently": "true", "detach_gpu": "true"})
    assert deleted.status_code < 300, deleted.text
    plane.observe()

    result = plane.reconcile(cluster)

    assert [(s.kind, s.target) for s in result.plan] == [
        ("replace_vm", "a100-0"),
        ("provision", "a100-1"),
    ]
    remade = Machine.objects.get(name="a100-0")
    assert remade.phase == Machine.Phase.RUNNING and remade.vm_id != vanished.vm_id
    assert (remade.spec["gpu_type"], remade.spec["vcpus"]) == ("NVIDIA A100", 8)
    assert remade.spec_changes() == ["gpu_type NVIDIA A100 -> NVIDIA L40S"]
