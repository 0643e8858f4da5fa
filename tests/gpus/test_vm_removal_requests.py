"""A person removes a VM that no machine owns, or releases every orphan at once with one
reason: each asked for, checked and audited on its own, carried out by the location's next
sweep without the grace period automatic removal waits for."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from rest_framework.test import APIClient

from capvco_web.audit import SystemActor
from capvco_web.models import AuditEvent
from cloud.models import Location, VirtualMachine
from cloud.whitesky import whitesky_client
from clusters.models import Machine, MachinePool, VmRemovalRequest
from clusters.releases import location_plan, orphans_release_request, vm_removal_request
from clusters.services import machine_force_delete
from gpus.models import VgpuReservation
from gpus.selectors import orphans_list
from gpus.services import ReleaseRefused
from tests.factories import MembershipFactory
from tests.gpus.conftest import NL, Plane
from tests.gpus.support import auto_release_set, sweep
from tests.gpus.test_vm_orphans import running_gpu_machine, sim_vm_status, vm_create


def operator(plane: Plane, role: str = "operator") -> User:
    user = User.objects.create_user(f"{role}-1")
    MembershipFactory(user=user, account=plane.account, role=role)
    return user


def site_made(plane: Plane) -> None:
    """A cluster with a site at NL: the VMs of its cloudspace are listed."""
    plane.pool(plane.cluster(), "cpu", replicas=0)


def force_deleted(plane: Plane) -> Machine:
    """A running GPU machine deleted with force: its VM and vGPU left behind, observed."""
    machine = running_gpu_machine(plane)
    MachinePool.objects.filter(pk=machine.pool_id).update(replicas=0)
    machine_force_delete(machine=machine, actor=SystemActor.RECONCILER, reason="stuck")
    plane.observe()
    return machine


def test_a_person_removes_an_orphan_vm_at_once_although_auto_release_is_off(
    plane: Plane,
) -> None:
    auto_release_set(plane.account, on=False, grace_seconds=86400)
    site_made(plane)
    stray = vm_create(plane, "capvco-demo-gone-3")
    plane.observe()
    vm = VirtualMachine.objects.get(vm_id=stray)
    person = operator(plane)
    assert sweep(plane).removed == []  # nothing happens without a person here

    vm_removal_request(vm=vm, actor=person, reason="left by a failed test run")

    asked = AuditEvent.objects.get(action="vm.delete_requested")
    assert (asked.actor_name, asked.reason) == ("operator-1", "left by a failed test run")
    [step] = location_plan(Location.objects.get(name=NL)).steps
    assert (step.kind, step.origin, step.target) == ("remove_vm", "request", "capvco-demo-gone-3")
    assert [(c.verb, c.object) for c in step.calls()][-1][1] == str(stray)

    result = sweep(plane)

    assert result.removed == ["capvco-demo-gone-3"]
    assert sim_vm_status(plane, stray) in (None, "DESTROYED")
    done = AuditEvent.objects.get(action="vm.delete")
    assert (done.actor_name, done.reason) == ("operator-1", "left by a failed test run")
    assert VmRemovalRequest.objects.get().done_at is not None
    assert location_plan(Location.objects.get(name=NL)).steps == []  # closed: not again


def test_the_vm_of_a_live_machine_is_refused_and_nothing_is_recorded(plane: Plane) -> None:
    machine = running_gpu_machine(plane)
    plane.observe()
    vm = VirtualMachine.objects.get(vm_id=machine.vm_id)

    with pytest.raises(ReleaseRefused, match="is machine demo/a100-0's"):
        vm_removal_request(vm=vm, actor=operator(plane), reason="mistake")

    assert not VmRemovalRequest.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="vm.").exists()
    assert sim_vm_status(plane, machine.vm_id or 0) == "RUNNING"


def test_a_vm_not_named_by_us_for_an_operator_and_a_second_request_are_refused(
    plane: Plane,
) -> None:
    site_made(plane)
    foreign = vm_create(plane, "bastion")
    stray = vm_create(plane, "capvco-demo-gone-4")
    plane.observe()
    plane.observe()
    person = operator(plane)

    with pytest.raises(PermissionDenied, match="remove_foreign_virtualmachine"):
        vm_removal_request(vm=VirtualMachine.objects.get(vm_id=foreign), actor=person, reason="x")
    vm_removal_request(vm=VirtualMachine.objects.get(vm_id=stray), actor=person, reason="gone")
    with pytest.raises(ReleaseRefused, match="asked for its removal already"):
        vm_removal_request(vm=VirtualMachine.objects.get(vm_id=stray), actor=person, reason="2")

    assert VmRemovalRequest.objects.count() == 1


def test_a_viewer_may_not_ask_for_a_removal(plane: Plane) -> None:
    site_made(plane)
    vm_create(plane, "capvco-demo-gone-5")
    plane.observe()
    with pytest.raises(PermissionDenied):
        vm_removal_request(
            vm=VirtualMachine.objects.get(), actor=operator(plane, "viewer"), reason="x"
        )
    assert not VmRemovalRequest.objects.exists()


def test_a_vm_gone_before_the_sweep_closes_its_request_without_a_call(plane: Plane) -> None:
    site_made(plane)
    stray = vm_create(plane, "capvco-demo-gone-6")
    plane.observe()
    vm_removal_request(vm=VirtualMachine.objects.get(), actor=operator(plane), reason="gone")
    with whitesky_client(plane.account) as client:  # deleted by hand meanwhile
        client.delete_vm(cloudspace_id=VirtualMachine.objects.get().cloudspace_id, vm_id=stray)
    plane.observe()  # a complete listing without it: the mirror row goes

    [step] = location_plan(Location.objects.get(name=NL)).steps
    assert step.calls() == ()
    sweep(plane)

    assert VmRemovalRequest.objects.get().done_at is not None
    assert not AuditEvent.objects.filter(action="vm.delete").exists()


def test_bulk_release_asks_for_each_orphan_with_one_reason_and_the_sweep_reclaims_all(
    plane: Plane,
) -> None:
    auto_release_set(plane.account, on=False, grace_seconds=86400)
    machine = force_deleted(plane)
    stray = vm_create(plane, "capvco-demo-gone-8")
    plane.observe()
    person = operator(plane)
    vms = list(VirtualMachine.objects.filter(orphaned_since__isnull=False).order_by("vm_id"))
    assert {vm.vm_id for vm in vms} == {machine.vm_id, stray}

    outcome = orphans_release_request(
        actor=person, reason="clean-up after the outage", reservations=list(orphans_list()), vms=vms
    )

    assert outcome.refused == []
    assert sorted(outcome.asked) == sorted(
        ["VM capvco-demo-a100-0", "VM capvco-demo-gone-8", "capvco-demo-a100-0-gpu-0"]
    )
    result = sweep(plane)
    assert sorted(result.removed) == ["capvco-demo-a100-0", "capvco-demo-gone-8"]
    assert result.released == ["capvco-demo-a100-0-gpu-0"]
    assert plane.sim_vms() == [] and plane.sim_vgpus() == []
    events = AuditEvent.objects.filter(actor_name="operator-1")
    assert sorted(events.values_list("action", flat=True)) == sorted(
        ["vm.delete_requested"] * 2 + ["vgpu.release_requested"]
        + ["vm.delete"] * 2 + ["vgpu.release"]
    )  # fmt: skip
    assert set(events.values_list("reason", flat=True)) == {"clean-up after the outage"}


def test_bulk_release_reports_what_it_could_not_ask_for_and_asks_the_rest(
    plane: Plane,
) -> None:
    live = running_gpu_machine(plane)
    stray = vm_create(plane, "capvco-demo-gone-9")
    plane.observe()
    vms = list(VirtualMachine.objects.filter(vm_id__in=[live.vm_id, stray]))
    held = VgpuReservation.objects.filter(machine=live)

    outcome = orphans_release_request(
        actor=operator(plane), reason="bulk", reservations=list(held), vms=vms
    )

    assert outcome.asked == ["VM capvco-demo-gone-9"]
    assert len(outcome.refused) == 2
    assert all("a100-0" in why for why in outcome.refused)
    assert VmRemovalRequest.objects.get().vm_id == stray


def test_the_api_lists_orphan_vms_and_removes_one_at_a_persons_request(
    plane: Plane, run_tasks: Callable[[], AbstractContextManager[None]]
) -> None:
    live = running_gpu_machine(plane)
    stray = vm_create(plane, "capvco-demo-gone-10")
    plane.observe()
    api = APIClient()
    api.force_authenticate(operator(plane))

    listed = api.get("/api/v1/vms/", {"orphaned": "true"}).json()["results"]
    assert [(vm["name"], vm["compute_monthly_price"]) for vm in listed] == [
        ("capvco-demo-gone-10", "40.0000")  # 2 vCPUs at 12.00, 4 GiB at 4.00
    ]
    machine_vm = VirtualMachine.objects.get(vm_id=live.vm_id)
    refused = api.post(f"/api/v1/vms/{machine_vm.pk}/remove/", {"reason": "x"}, format="json")
    assert refused.status_code == 409 and "demo/a100-0" in refused.json()["detail"]
    assert api.post(f"/api/v1/vms/{listed[0]['id']}/remove/", {}, format="json").status_code == 400

    with run_tasks():
        asked = api.post(
            f"/api/v1/vms/{listed[0]['id']}/remove/", {"reason": "stray"}, format="json"
        )

    assert asked.status_code == 202
    assert sim_vm_status(plane, stray) in (None, "DESTROYED")
    assert sim_vm_status(plane, live.vm_id or 0) == "RUNNING"
    viewer = APIClient()
    viewer.force_authenticate(operator(plane, "viewer"))
    assert viewer.get("/api/v1/vms/").status_code == 200
    assert (
        viewer.post(f"/api/v1/vms/{machine_vm.pk}/remove/", {"reason": "x"}, format="json")
    ).status_code == 403


def test_the_sweep_records_its_removal_in_a_row_of_its_own_and_leaves_the_vm_row_to_observe(
    plane: Plane,
) -> None:
    auto_release_set(plane.account, confirmations=1)
    site_made(plane)
    stray = vm_create(plane, "capvco-demo-gone-11")
    plane.observe()
    before = VirtualMachine.objects.values().get(vm_id=stray)

    assert sweep(plane).removed == ["capvco-demo-gone-11"]

    # The mirror row is what the last listing said, untouched by act until observe lists
    # again; the removal is ours, recorded beside it, and keeps a second sweep from
    # removing it again before that listing.
    assert VirtualMachine.objects.values().get(vm_id=stray) == before
    removal = VmRemovalRequest.objects.get(vm_id=stray)
    assert removal.requested_by is None and removal.done_at is not None
    assert sweep(plane).removed == []
    assert AuditEvent.objects.filter(action="vm.delete").count() == 1
    plane.observe()  # a complete listing begun after the removal: the VM is gone
    assert not VirtualMachine.objects.filter(vm_id=stray).exists()
