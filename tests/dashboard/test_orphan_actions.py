"""Orphans from the overview: VMs that no machine owns, with what they cost, removed by a
person at once; every orphan released with one reason, each release audited; each carried
out on whitesky by the sweep the action sends."""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal

import pytest
from django.test import Client

from capvco_web.models import AuditEvent
from cloud.models import Location, VirtualMachine
from clusters.models import VmRemovalRequest
from tests.factories import MembershipFactory
from tests.gpus.conftest import NL, Plane
from tests.gpus.support import auto_release_set
from tests.gpus.test_vm_orphans import sim_vm_status, vm_create
from tests.gpus.test_vm_removal_requests import force_deleted, site_made

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
RunTasks = Callable[[], AbstractContextManager[None]]


def test_the_overview_shows_each_orphan_vm_with_its_cost_at_the_locations_prices(
    admin_client: Client, plane: Plane
) -> None:
    site_made(plane)
    stray = vm_create(plane, "capvco-demo-gone-1")  # 2 vCPUs, 4096 MiB
    plane.observe()
    location = Location.objects.get(name=NL)
    # 2 vCPUs at 12.00 and 4 GiB at 4.00 a month: 40.00 a month, 0.0548 an hour.
    assert (location.unit_price("vcu"), location.unit_price("mu")) == (12, 4)
    assert VirtualMachine.objects.get(vm_id=stray).compute_monthly_price() == Decimal(40)

    html = admin_client.get("/").content.decode()

    row = re.search(rf'<tr id="orphan-vm-{stray}">(.*?)</tr>', html, re.S)
    assert row is not None
    cells = row.group(1)
    assert "capvco-demo-gone-1" in cells and "no cluster of this account" in cells
    assert "0.05 EUR" in cells
    assert f'href="/vms/{VirtualMachine.objects.get(vm_id=stray).pk}/remove/"' in cells
    assert "Release all orphans" in html


def test_remove_from_the_overview_removes_the_vm_on_whitesky_audited_as_the_person(
    admin_client: Client, plane: Plane, run_tasks: RunTasks
) -> None:
    auto_release_set(plane.account, on=False, grace_seconds=86400)
    site_made(plane)
    stray = vm_create(plane, "capvco-demo-gone-2")
    plane.observe()
    vm = VirtualMachine.objects.get(vm_id=stray)

    with run_tasks():
        response = admin_client.post(f"/vms/{vm.pk}/remove/", {"reason": "hand-made"}, **HTMX)

    assert response.status_code == 200, response.content
    assert "Removal of VM capvco-demo-gone-2 asked for" in response.content.decode()
    assert sim_vm_status(plane, stray) in (None, "DESTROYED")
    done = AuditEvent.objects.get(action="vm.delete")
    assert (done.actor_name, done.reason) == ("admin", "hand-made")


def test_remove_of_a_machines_vm_is_refused_with_409_and_nothing_is_recorded(
    admin_client: Client, plane: Plane
) -> None:
    from tests.gpus.test_vm_orphans import running_gpu_machine

    machine = running_gpu_machine(plane)
    plane.observe()
    vm = VirtualMachine.objects.get(vm_id=machine.vm_id)

    response = admin_client.post(f"/vms/{vm.pk}/remove/", {"reason": "oops"}, **HTMX)

    assert response.status_code == 409
    assert "is machine demo/a100-0&#x27;s" in response.content.decode()
    assert not VmRemovalRequest.objects.exists()


def test_release_all_orphans_with_one_reason_reclaims_every_one_on_whitesky(
    admin_client: Client, plane: Plane, run_tasks: RunTasks
) -> None:
    auto_release_set(plane.account, on=False, grace_seconds=86400)
    force_deleted(plane)
    vm_create(plane, "capvco-demo-gone-3")
    plane.observe()

    confirm = admin_client.get("/orphans/release/").content.decode()
    assert "2 VMs and 1 vGPU reservations" in confirm
    assert "capvco-demo-a100-0-gpu-0" in confirm and "capvco-demo-gone-3" in confirm
    with run_tasks():
        response = admin_client.post("/orphans/release/", {"reason": "after the outage"})

    assert response.status_code == 302
    assert plane.sim_vms() == [] and plane.sim_vgpus() == []
    done = AuditEvent.objects.filter(action__in=["vm.delete", "vgpu.release"])
    assert sorted(done.values_list("action", "reason")) == [
        ("vgpu.release", "after the outage"),
        ("vm.delete", "after the outage"),
        ("vm.delete", "after the outage"),
    ]


def test_release_all_takes_only_what_the_user_may_release_and_a_viewer_is_refused(
    client: Client, plane: Plane
) -> None:
    force_deleted(plane)
    viewer = MembershipFactory(account=plane.account, role="viewer").user
    client.force_login(viewer)
    assert client.get("/orphans/release/").status_code == 403
    assert client.post("/orphans/release/", {"reason": "x"}).status_code == 403
    stranger = MembershipFactory(role="admin").user  # an admin of another account
    client.force_login(stranger)
    page = client.get("/orphans/release/").content.decode()
    assert "0 VMs and 0 vGPU reservations" in page
    assert client.post("/orphans/release/", {"reason": "x"}).status_code == 400
    assert not AuditEvent.objects.filter(action__endswith="_requested").exists()
