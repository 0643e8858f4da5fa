"""A VM made outside the control plane (not named by us, held by no machine) shows from the
VM mirror as soon as a listing has it, with what it costs, on the overview, in the API
and in the admin; an admin removes one with a reason, audited, from a complete listing
begun after it last changed, and carried out on whitesky by the location's sweep."""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.core.exceptions import PermissionDenied
from django.test import Client
from rest_framework.test import APIClient

from capvco_web.models import AuditEvent
from cloud.models import VirtualMachine
from cloud.whitesky import whitesky_client
from clusters.models import ClusterSite, VmRemovalRequest
from clusters.releases import vm_removal_request
from gpus.models import hourly_price
from gpus.services import ReleaseRefused
from tests.factories import MembershipFactory
from tests.gpus.conftest import CLOUDSPACES, NL, Plane
from tests.gpus.support import sweep
from tests.gpus.test_vm_orphans import running_gpu_machine, sim_vm_status, vm_create
from tests.gpus.test_vm_removal_requests import site_made

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
RunTasks = Callable[[], AbstractContextManager[None]]
VMS_ADMIN = "/admin/cloud/virtualmachine/"


def member(plane: Plane, role: str) -> User:
    user = User.objects.create_user(f"{role}-x", password="pw")
    MembershipFactory(user=user, account=plane.account, role=role)
    return user


def bastion(plane: Plane, name: str = "bastion") -> VirtualMachine:
    """A VM made by hand in a cluster's cloudspace, listed once."""
    if not ClusterSite.objects.exists():
        site_made(plane)
    vm_id = vm_create(plane, name)  # 2 vCPUs, 4096 MiB, halted
    plane.observe()
    return VirtualMachine.objects.get(vm_id=vm_id)


def api_as(user: User) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def test_a_vm_made_by_hand_shows_on_the_overview_at_once_with_its_cost(
    admin_client: Client, plane: Plane
) -> None:
    machine = running_gpu_machine(plane)
    vm = bastion(plane)
    # 2 vCPUs at 12.00 and 4 GiB at 4.00 a month: the money code's hourly price of it.
    hourly = hourly_price(vm.compute_monthly_price())
    assert vm.compute_monthly_price() == Decimal(40)

    html = admin_client.get("/").content.decode()

    section = re.search(r'id="vms-not-ours"(.*?)</section>', html, re.S)
    assert section is not None, "no section of VMs not named by us"
    row = re.search(rf'<tr id="vm-not-ours-{vm.vm_id}">(.*?)</tr>', section.group(1), re.S)
    assert row is not None
    cells = row.group(1)
    assert "bastion" in cells and CLOUDSPACES[NL] in cells and "HALTED" in cells
    assert f"{hourly.quantize(Decimal('0.01'))} EUR" in cells  # 0.05 an hour
    assert f'href="/vms/{vm.pk}/remove/"' in cells
    assert f"vm-not-ours-{machine.vm_id}" not in html  # a machine's VM is ours


def test_an_admin_removes_a_vm_not_named_by_us_through_the_api_with_a_reason(
    plane: Plane, run_tasks: RunTasks
) -> None:
    vm = bastion(plane)
    plane.observe()  # a complete listing begun after it last changed
    api = api_as(member(plane, "admin"))

    listed = api.get("/api/v1/vms/", {"not_ours": "true"}).json()["results"]
    assert [(row["name"], row["named_by_us"], row["hourly_cost"]) for row in listed] == [
        ("bastion", False, str(hourly_price(Decimal(40)).quantize(Decimal("0.0001"))))
    ]
    assert api.post(f"/api/v1/vms/{vm.pk}/remove/", {}, format="json").status_code == 400
    with run_tasks():
        asked = api.post(
            f"/api/v1/vms/{vm.pk}/remove/", {"reason": "left from a demo"}, format="json"
        )

    assert asked.status_code == 202, asked.json()
    assert sim_vm_status(plane, vm.vm_id) in (None, "DESTROYED")
    requested = AuditEvent.objects.get(action="vm.delete_requested")
    done = AuditEvent.objects.get(action="vm.delete")
    assert (done.actor_name, done.reason) == ("admin-x", "left from a demo")
    assert (requested.before or {})["name"] == "bastion"
    assert (requested.after or {})["removal_requested"] is True
    assert (done.before or {})["status"] == "HALTED"
    assert (done.after or {})["deleted"] is True
    # Asked again once done, before a listing shows it gone: refused, nothing more happens.
    again = api.post(f"/api/v1/vms/{vm.pk}/remove/", {"reason": "again"}, format="json")
    assert again.status_code == 409 and "was removed" in again.json()["detail"]
    assert VmRemovalRequest.objects.count() == 1
    plane.observe()
    assert not VirtualMachine.objects.filter(vm_id=vm.vm_id).exists()
    assert AuditEvent.objects.filter(action="vm.delete").count() == 1


def test_an_operator_may_not_remove_a_vm_not_named_by_us(plane: Plane) -> None:
    vm = bastion(plane)
    plane.observe()
    operator = member(plane, "operator")

    with pytest.raises(PermissionDenied):
        vm_removal_request(vm=vm, actor=operator, reason="looks unused")
    answer = api_as(operator).post(f"/api/v1/vms/{vm.pk}/remove/", {"reason": "x"}, format="json")

    assert answer.status_code == 403
    assert not VmRemovalRequest.objects.exists()
    assert sim_vm_status(plane, vm.vm_id) == "HALTED"


def test_no_removal_before_a_complete_listing_begun_after_its_last_change(plane: Plane) -> None:
    vm = bastion(plane)  # listed once: the listing that showed it began before it was seen
    admin = member(plane, "admin")

    with pytest.raises(ReleaseRefused, match="complete listing"):
        vm_removal_request(vm=vm, actor=admin, reason="hand-made")
    ClusterSite.objects.filter(cloudspace_id=vm.cloudspace_id).update(
        observation_error="VMs of cloudspace: timed out"
    )
    plane.location(NL).__class__.objects.filter(pk=vm.location_id).update(
        observation_started_at=vm.changed_at.replace(year=vm.changed_at.year + 1)
    )
    with pytest.raises(ReleaseRefused, match="complete listing"):
        vm_removal_request(vm=VirtualMachine.objects.get(pk=vm.pk), actor=admin, reason="x")

    plane.observe()  # whole, and begun after it was first seen

    vm_removal_request(vm=VirtualMachine.objects.get(pk=vm.pk), actor=admin, reason="hand-made")
    assert VmRemovalRequest.objects.get().name == "bastion"


def test_a_vm_changed_after_the_request_is_left_alone_and_the_refusal_audited(
    plane: Plane,
) -> None:
    vm = bastion(plane)
    plane.observe()
    vm_removal_request(vm=vm, actor=member(plane, "admin"), reason="hand-made")
    with whitesky_client(plane.account) as client:  # someone starts it meanwhile
        client.start_vm(cloudspace_id=vm.cloudspace_id, vm_id=vm.vm_id)
    plane.observe()

    result = sweep(plane)

    assert result.removed == [] and len(result.errors) == 1
    assert "changed since" in result.errors[0]
    assert sim_vm_status(plane, vm.vm_id) == "RUNNING"
    refused = AuditEvent.objects.get(action="vm.delete_refused")
    assert "changed since" in (refused.after or {})["error"]
    assert VmRemovalRequest.objects.get().done_at is not None


def test_the_admin_lists_vms_not_ours_and_removes_one_with_a_reason(
    plane: Plane, admin_client: Client, run_tasks: RunTasks
) -> None:
    vm = bastion(plane)
    plane.observe()

    page = admin_client.get(VMS_ADMIN, {"owner": "not_ours"})
    assert page.status_code == 200
    assert [row.pk for row in page.context["cl"].result_list] == [vm.pk]
    assert "Remove selected VMs" in page.content.decode()
    data: dict[str, Any] = {"action": "remove_selected", "_selected_action": [vm.pk]}
    asked = admin_client.post(VMS_ADMIN, data)
    assert asked.status_code == 200 and "reason" in asked.context["form"].fields
    with run_tasks():
        done = admin_client.post(VMS_ADMIN, {**data, "confirm": "yes", "reason": "hand-made"})

    assert done.status_code == 302
    assert [str(m) for m in get_messages(done.wsgi_request)] == [
        f"bastion ({vm.vm_id}): removal requested; the location's next sweep carries it out "
        "and the audit log shows the outcome."
    ]
    assert sim_vm_status(plane, vm.vm_id) in (None, "DESTROYED")
    assert AuditEvent.objects.get(action="vm.delete").reason == "hand-made"


def test_the_dashboard_removes_a_vm_not_named_by_us_for_an_admin_only(
    plane: Plane, run_tasks: RunTasks
) -> None:
    vm = bastion(plane)
    plane.observe()
    operator, admin = Client(), Client()
    operator.force_login(member(plane, "operator"))
    admin.force_login(member(plane, "admin"))

    assert f'href="/vms/{vm.pk}/remove/"' not in operator.get("/").content.decode()
    refused = operator.post(f"/vms/{vm.pk}/remove/", {"reason": "x"}, **HTMX)
    assert refused.status_code == 403
    form = admin.get(f"/vms/{vm.pk}/remove/", **HTMX).content.decode()
    assert "Remove VM not named by us" in form and "bastion" in form
    with run_tasks():
        done = admin.post(f"/vms/{vm.pk}/remove/", {"reason": "old demo"}, **HTMX)

    assert done.status_code == 200
    assert "Removal of VM bastion asked for" in done.content.decode()
    assert sim_vm_status(plane, vm.vm_id) in (None, "DESTROYED")
    assert AuditEvent.objects.get(action="vm.delete").actor_name == "admin-x"


def test_an_admin_of_another_account_neither_sees_nor_removes_it(plane: Plane) -> None:
    vm = bastion(plane)
    plane.observe()
    stranger = User.objects.create_user("stranger", password="pw", is_staff=True)
    MembershipFactory(user=stranger, role="admin")  # of an account of its own
    browser = Client()
    browser.force_login(stranger)

    assert list(browser.get(VMS_ADMIN).context["cl"].result_list) == []
    assert f"vm-not-ours-{vm.vm_id}" not in browser.get("/").content.decode()
    answer = api_as(stranger).post(f"/api/v1/vms/{vm.pk}/remove/", {"reason": "x"}, format="json")
    assert answer.status_code == 404
    assert browser.post(f"/vms/{vm.pk}/remove/", {"reason": "x"}).status_code == 404
    assert not VmRemovalRequest.objects.exists()
